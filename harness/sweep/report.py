"""A sweep's closing summary: one row per point, from its stored run, plus plots and report.html.

A workload's own figures come from its record (``Workload.figures``: the workload's arithmetic on
the stored config and mesh), with what the run measured beside them here: for a collective, the
measured bus bandwidth (bytes each device moves over links / measured collective time) next to
the one the book predicts (same bytes / ``analytic_s``); for a matmul, the roofline efficiency of
its matmul ops and its MFU, against its size 2BDF.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness import schema
from harness.analysis.gaps import (
    beats_roofline,
    beats_roofline_reason,
    bus_gbps,
    category_efficiency,
    within_spread,
    workload_efficiency,
)
from harness.chip import drift, spells
from harness.errors import HarnessError
from harness.record import Run, store
from harness.report import heading, page, tables
from harness.step.verdict import PACED
from harness.sweep import plots as sweep_plots
from harness.units import fmt_seconds
from predictions.hardware import CHIPS

log = logging.getLogger(__name__)

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"
COLLECTIVE_PNG = "collective_bandwidth.png"
MATMUL_PNG = "matmul_efficiency.png"

# Op categories whose roofline efficiency a workload's figures may show -> the summary column
EFFICIENCY_OF: dict[str, str] = {schema.CAT_MATMUL: schema.MATMUL_EFFICIENCY}


def _efficiency(run: Run, category: str) -> dict:
    if category not in EFFICIENCY_OF:
        raise HarnessError(f"no sweep summary column for the efficiency of {category!r} ops; "
                           f"valid: {', '.join(EFFICIENCY_OF)}")
    return {EFFICIENCY_OF[category]: category_efficiency(run.ops, category)}


def _bus_bandwidth(run: Run, bus) -> dict:
    """A collective's bus bandwidth (``workloads.base.BusBytes``), measured over the collective
    ops' time and predicted over the book's ``analytic_s``, in 1e9 bytes/s."""
    in_collectives = run.ops[schema.CATEGORY] == schema.CAT_COLLECTIVE
    t = float(run.ops.loc[in_collectives, schema.MEASURED_S].sum())
    return {schema.COLLECTIVE: bus.collective, schema.GROUP_SIZE: bus.group_size,
            schema.MESSAGE_BYTES: bus.message_bytes, schema.COLLECTIVE_S: t,
            schema.BUS_BYTES: bus.bus_bytes, schema.MEASURED_BUS_GBPS: bus_gbps(bus.bus_bytes, t),
            schema.PREDICTED_BUS_GBPS: bus_gbps(bus.bus_bytes,
                                                run.summary.get(schema.ANALYTIC_S))}


def workload_figures(run: Run, workload) -> dict:
    """The sweep figures ``workload`` declares for a stored run (``Workload.figures`` on its
    stored config and mesh), with what the run measured beside them; {} when it declares none."""
    if workload.figures is None:
        return {}
    cfg = workload.stored_config(run.meta.get(schema.CONFIG, {}))
    figures = workload.figures(cfg, SimpleNamespace(shape=run.meta.get(schema.MESH, {})))
    row = {schema.SERIES: figures.series}
    for category in figures.efficiency_of:
        row.update(_efficiency(run, category))
    if figures.bus is not None:
        row.update(_bus_bandwidth(run, figures.bus))
    return row


def point_row(record: dict, sweep_dir: Path) -> dict:
    """The summary row of one manifest record (figures from its stored run when done)."""
    row = {schema.POINT: record["index"] + 1, schema.WORKLOAD: record["workload"],
           schema.PRESET: record["preset"], schema.MESH: record["mesh"],
           schema.CHIP: record.get("chip") or "",
           schema.OVERRIDES: " ".join(f"{k}={v}" for k, v in record["overrides"].items()),
           schema.STATUS: record["status"], schema.ERROR: record.get("error") or "",
           schema.RUN: record.get("run") or "", schema.KEY: record["key"]}
    if record["status"] != "done" or not record.get("run"):
        return row
    try:
        run = Run.load(sweep_dir / record["run"])
    except HarnessError as e:
        log.warning("sweep point %d: %s", record["index"] + 1, e)
        return dict(row, **{schema.ERROR: str(e)})
    s, step = run.summary, run.step
    row.update({schema.CHIP: run.meta.get(schema.CHIP, row[schema.CHIP]),
                schema.STEP_S: s.get(schema.STEP_S), schema.WALL_STEP_S: s.get(schema.WALL_STEP_S),
                **{k: step.get(k) for k in (schema.EXPOSED_COMM_S, schema.IDLE_S,
                                            schema.WAITING_S, schema.WAIT_BOUND,
                                            schema.PREDICTED_STEP_S)},
                schema.COVERAGE: s.get(schema.COVERAGE),
                # a sweep's points are all paced by the harness's capture loop: no news
                **({schema.WAIT_BOUND: None} if step.get(schema.WAIT_BOUND) == PACED else {}),
                schema.EFFICIENCY: workload_efficiency(run.ops),
                schema.MFU: s.get(schema.MFU), schema.ANALYTIC_S: s.get(schema.ANALYTIC_S),
                schema.MODEL_FLOPS: s.get(schema.MODEL_FLOPS),
                schema.HOST_SPEED: (run.meta.get(drift.HOST_DRIFT) or {}).get(drift.FACTOR),
                schema.HOST_SPREAD: spells.spread_of(run.meta.get(schema.CALIBRATION))})
    import workloads  # deferred: importing workloads imports jax

    try:
        row.update(workload_figures(run, workloads.get(record["workload"])))
    except workloads.WorkloadError as e:  # no longer registered, or its config changed shape
        log.warning("sweep point %d: no workload figures: %s", record["index"] + 1, e)
    return row


def summary_table(sweep_dir: Path, records: list[dict]) -> pd.DataFrame:
    rows = [point_row(r, sweep_dir) for r in records]
    df = pd.DataFrame(rows)
    for c in schema.SWEEP_SUMMARY:
        if c not in df.columns:
            df[c] = math.nan
    return df[list(schema.SWEEP_SUMMARY)]


SHOWN = (schema.POINT, schema.WORKLOAD, schema.MESH, schema.OVERRIDES, schema.STATUS,
         schema.STEP_S, schema.EXPOSED_COMM_S, schema.IDLE_S, schema.WAITING_S,
         schema.WAIT_BOUND, schema.PREDICTED_STEP_S, schema.ANALYTIC_S, schema.EFFICIENCY,
         schema.MFU, schema.MATMUL_EFFICIENCY,
         schema.MEASURED_BUS_GBPS, schema.PREDICTED_BUS_GBPS, schema.COVERAGE, schema.HOST_SPEED)


def shown(df: pd.DataFrame, *, workload: bool = True) -> pd.DataFrame:
    """The columns worth reading (all-empty figure columns dropped, the status only where some
    point is not done, the workload only with ``workload``), NaN as blank."""
    skip = {schema.WORKLOAD} if not workload else set()
    if (df[schema.STATUS] == "done").all():
        skip.add(schema.STATUS)
    cols = [c for c in SHOWN if c in df.columns and c not in skip and df[c].notna().any()]
    return df[cols]


def by_workload(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(workload, its points' shown table) per workload, in sweep order: each table has only
    the figures that apply to its workload (no MFU for a collective, no bus bandwidth for a
    matmul)."""
    return [(name, shown(g, workload=False))
            for name, g in df.groupby(schema.WORKLOAD, sort=False)]


# The summary's figures that are fractions of a roofline or a peak: above 100% is impossible.
ROOFLINE_FIGURES = (schema.EFFICIENCY, schema.MATMUL_EFFICIENCY, schema.MFU)


def _reason(row) -> str:
    chip = str(row.get(schema.CHIP) or "?")
    return beats_roofline_reason(chip, getattr(CHIPS.get(chip), "kind", ""), spread(row))


def spread(rows) -> float:
    """A point's host spread (``harness.chip.spells``), or the widest of a sweep's points (one
    calibration): what figures are marked within (``tables.mark``); NaN: none."""
    v = pd.Series(rows.get(schema.HOST_SPREAD), dtype=object)
    return float(pd.to_numeric(v, errors="coerce").max())


def impossible_notes(df: pd.DataFrame) -> list[str]:
    """One note per point whose efficiency or MFU beats the roofline (as the run report flags
    its ops: ``harness.analysis.gaps.beats_roofline``), with the host's speed its chip was scaled by
    where there is one (CPU), then the reason per chip."""
    out, chips = [], {}
    for _, row in df.iterrows():
        bad = [f"{c} {float(row[c]):.0%}" for c in ROOFLINE_FIGURES
               if c in df.columns and beats_roofline(row[c], spread(row))]
        if bad:
            chip = str(row.get(schema.CHIP) or "?")
            chips.setdefault(chip, [0, _reason(row)])[0] += 1
            speed = pd.to_numeric(row.get(schema.HOST_SPEED), errors="coerce")
            host = (f" (host at {speed:.2f}x its calibrated speed)" if pd.notna(speed) else "")
            out.append(f"point {row[schema.POINT]} ({row[schema.WORKLOAD]} "
                       f"{row[schema.OVERRIDES]}): {', '.join(bad)}{host}")
    out += [f"{n} point(s) ran {reason}" for n, reason in chips.values()]
    return out


def timing(records: list[dict]) -> str:
    """What the points' own plots cost: their drawing time out of the points' run time."""
    ran = [r for r in records if r.get("seconds")]
    total = sum(r["seconds"] for r in ran)
    plots = sum(r.get("plot_seconds") or 0.0 for r in ran)
    if not ran or not plots:
        return ""
    return (f"point plots: {plots:.1f} s of the {total:.0f} s the {len(ran)} point(s) took "
            f"({plots / total:.0%})")


def _meta(sweep_dir: Path, df: pd.DataFrame) -> dict:
    """The meta of the sweep's first stored run: the commit, jax and host it ran with."""
    for run in df[schema.RUN]:
        if run:
            try:
                return store.read_meta(sweep_dir / run)
            except (HarnessError, OSError):
                continue
    return {}


def heading_lines(header: dict, df: pd.DataFrame, meta: dict, records=()) -> list[str]:
    counts = df[schema.STATUS].value_counts().to_dict()
    chips = ", ".join(dict.fromkeys(str(c) for c in df[schema.CHIP] if c))
    first = [f"{len(df)} points: " + ", ".join(f"{v} {k}" for k, v in counts.items())]
    if chips:
        first.append(f"predicted for {chips}")
    if meta.get(schema.DEVICE_COUNT):
        first.append(f"{meta[schema.DEVICE_COUNT]}x {meta.get(schema.DEVICE_KIND, '?')}")
    second = [header.get("file", "")]
    if header.get("created"):
        second.append(f"started {heading.when(header['created'])}")
    if meta.get("jax_version"):
        second.append(f"jax {meta['jax_version']}")
    if meta.get(schema.GIT_SHA):
        second.append(f"commit {str(meta[schema.GIT_SHA])[:10]}")
    return [" · ".join(first), " · ".join(filter(None, second)), timing(list(records))]


def headline(df: pd.DataFrame) -> list[str]:
    """Per workload: how many points, the range of their steps, how far from the roofline."""
    out = []
    for name, g in df[df[schema.STATUS] == "done"].groupby(schema.WORKLOAD, sort=False):
        step = pd.to_numeric(g[schema.STEP_S], errors="coerce").dropna()
        eff = pd.to_numeric(g[schema.EFFICIENCY], errors="coerce").dropna()
        line = f"{name}: {len(g)} point(s)"
        if len(step):
            lo, hi = (fmt_seconds(v) for v in (step.min(), step.max()))
            line += f", step {lo}" + (f" to {hi}" if hi != lo else "")
        if len(eff):
            lo, hi = (tables.fmt_percent(v) for v in (eff.min(), eff.max()))
            line += f", efficiency {lo}% {f'to {hi}% ' if hi != lo else ''}of the roofline"
        over, near = (sum(f(v, spread(g)) for c in ROOFLINE_FIGURES if c in g for v in g[c])
                      for f in (beats_roofline, within_spread))
        marks = [f"{over} figure(s) above it, flagged"] * bool(over) + [
            f"{near} within the host's {spread(g):.2f}x spread"] * bool(near)
        out.append(line + (f" ({'; '.join(marks)})" if marks else ""))
    return out


def to_html(header: dict, df: pd.DataFrame, plots: list[str], *, meta: dict | None = None,
            records=()) -> str:
    title = f"Sweep {header.get('name', '')}"
    body = [page.heading(title, heading_lines(header, df, meta or {}, records), headline(df))]
    if header.get("description"):
        body.append(f"<p>{page.esc(header['description'])}</p>")
    body += [page.image(name) for name in plots]
    for name, table in by_workload(df):
        runs = [df.at[j, schema.RUN] for j in table.index]
        links = {i: f"{run}/report.html" for i, run in enumerate(runs)
                 if isinstance(run, str) and run}
        reason = "; ".join(dict.fromkeys(_reason(row) for _, row in df.loc[table.index].iterrows()))
        body.append(f"<h2>{page.esc(name)}</h2>"
                    + page.table(table, links=links, flag_reason=reason, spread=spread(df)))
    body.append(page.paragraphs(impossible_notes(df), "fail"))
    failed = df[df[schema.STATUS].isin(["failed", "oom"])]
    if not failed.empty:
        body.append("<h2>Failed points</h2><ul>" + "".join(
            f"<li class=fail>{p}. {page.esc(o)} (mesh {page.esc(m)}): {page.esc(e)}</li>"
            for p, o, m, e in failed[[schema.POINT, schema.OVERRIDES, schema.MESH,
                                      schema.ERROR]].itertuples(index=False)) + "</ul>")
    return page.document(title, body)


def to_markdown(header: dict, df: pd.DataFrame, plots: list[str]) -> str:
    out = [f"# Sweep {header.get('name', '')}\n\n"] + [f"{line}\n\n" for line in headline(df)]
    for name, table in by_workload(df):
        out.append(f"## {name}\n\n" + tables.to_markdown(table, spread(df))
                   + f"\n_{tables.legend_text(table.columns, spread=spread(df))}_\n\n")
    out += [f"> {n}\n\n" for n in impossible_notes(df)]
    out += [f"![{name[:-4]}]({name})\n\n" for name in plots]
    return "".join(out)


def write(sweep_dir: Path, header: dict, records: list[dict]) -> tuple[pd.DataFrame, Path]:
    """Write summary.csv, summary.md, the plots and report.html; returns (table, report path)."""
    df = summary_table(sweep_dir, records)
    (sweep_dir / SUMMARY_CSV).write_text(tables.to_csv(df))
    plots = []
    for name, plot in ((COLLECTIVE_PNG, sweep_plots.collective_bandwidth),
                       (MATMUL_PNG, sweep_plots.matmul_efficiency)):
        png = plot(df)
        if png:
            (sweep_dir / name).write_bytes(png)
            plots.append(name)
    (sweep_dir / SUMMARY_MD).write_text(to_markdown(header, df, plots))
    report = sweep_dir / REPORT_HTML
    report.write_text(to_html(header, df, plots, meta=_meta(sweep_dir, df), records=records))
    log.info("sweep report %s", report)
    return df, report
