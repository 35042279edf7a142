"""A sweep's closing summary: one row per point, from its stored run, plus plots and report.html.

A workload's own figures come from its record (``Workload.figures``: the workload's arithmetic on
the stored config and mesh), with what the run measured beside them here: for a collective, the
measured bus bandwidth (bytes each device moves over links / measured collective time) next to
the one the book predicts (same bytes / ``analytic_s``); for a matmul, the roofline efficiency of
its matmul ops and its MFU, against its size 2BDF.
"""
from __future__ import annotations

import html
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness import schema
from harness.calibrate import drift
from harness.compare import (
    beats_roofline,
    beats_roofline_reason,
    category_efficiency,
    workload_efficiency,
)
from harness.errors import HarnessError
from harness.report import tables
from harness.runs.run import Run
from harness.sweep import plots as sweep_plots
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
    gbps = (lambda s: bus.bus_bytes / s / 1e9 if s and s > 0 else math.nan)
    return {schema.COLLECTIVE: bus.collective, schema.GROUP_SIZE: bus.group_size,
            schema.MESSAGE_BYTES: bus.message_bytes, schema.COLLECTIVE_S: t,
            schema.BUS_BYTES: bus.bus_bytes, schema.MEASURED_BUS_GBPS: gbps(t),
            schema.PREDICTED_BUS_GBPS: gbps(run.summary.get(schema.ANALYTIC_S))}


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
                                            schema.PREDICTED_STEP_S)},
                schema.COVERAGE: s.get(schema.COVERAGE),
                schema.EFFICIENCY: workload_efficiency(run.ops),
                schema.MFU: s.get(schema.MFU), schema.ANALYTIC_S: s.get(schema.ANALYTIC_S),
                schema.MODEL_FLOPS: s.get(schema.MODEL_FLOPS),
                schema.HOST_SPEED: (run.meta.get(drift.HOST_DRIFT) or {}).get(drift.FACTOR)})
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
         schema.STEP_S, schema.EXPOSED_COMM_S, schema.IDLE_S, schema.PREDICTED_STEP_S,
         schema.COVERAGE, schema.EFFICIENCY, schema.MFU, schema.ANALYTIC_S,
         schema.MEASURED_BUS_GBPS, schema.PREDICTED_BUS_GBPS, schema.MATMUL_EFFICIENCY,
         schema.HOST_SPEED)


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """The columns worth reading (all-empty figure columns dropped), NaN as blank."""
    cols = [c for c in SHOWN if c in df.columns and df[c].notna().any()]
    return df[cols]


# The summary's figures that are fractions of a roofline or a peak: above 100% is impossible.
ROOFLINE_FIGURES = (schema.EFFICIENCY, schema.MATMUL_EFFICIENCY, schema.MFU)


def impossible_notes(df: pd.DataFrame) -> list[str]:
    """One note per point whose efficiency or MFU beats the roofline (as the run report flags
    its ops: ``harness.compare.beats_roofline``), with the host's speed its chip was scaled by
    where there is one (CPU), then the reason per chip."""
    out, chips = [], {}
    for _, row in df.iterrows():
        bad = [f"{c} {float(row[c]):.0%}" for c in ROOFLINE_FIGURES
               if c in df.columns and beats_roofline(row[c])]
        if bad:
            chip = str(row.get(schema.CHIP) or "?")
            chips[chip] = chips.get(chip, 0) + 1
            speed = pd.to_numeric(row.get(schema.HOST_SPEED), errors="coerce")
            host = (f" (host at {speed:.2f}x its calibrated speed)" if pd.notna(speed) else "")
            out.append(f"point {row[schema.POINT]} ({row[schema.WORKLOAD]} "
                       f"{row[schema.OVERRIDES]}): {', '.join(bad)}{host}")
    out += [f"{n} point(s) ran {beats_roofline_reason(chip, getattr(CHIPS.get(chip), 'kind', ''))}"
            for chip, n in chips.items()]
    return out


def _html_table(df: pd.DataFrame, links: dict[int, str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = []
    for i, row in enumerate(df.itertuples(index=False)):
        cells = []
        for c, v in zip(df.columns, row):
            text = html.escape(tables.formatter(c)(v) if not isinstance(v, str) else v)
            if c == schema.POINT and links and links.get(i):
                text = f'<a href="{html.escape(links[i])}">{text}</a>'
            cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def to_html(header: dict, df: pd.DataFrame, figures: list[str]) -> str:
    title = f"Sweep {header.get('name', '')}"
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;"
             "padding:3px 8px;text-align:right}th{background:#f4f4f4}.fail{color:#a00}")
    counts = df[schema.STATUS].value_counts().to_dict()
    body = [f"<h1>{html.escape(title)}</h1>",
            (f"<p><i>{html.escape(header.get('file', ''))} · started {header.get('created', '')}"
             f" · {', '.join(f'{v} {k}' for k, v in counts.items())}</i></p>")]
    if header.get("description"):
        body.append(f"<p>{html.escape(header['description'])}</p>")
    body += [f'<p><img alt="{name}" src="{name}"></p>' for name in figures]
    links = {i: f"{run}/report.html" for i, run in enumerate(df[schema.RUN]) if run}
    body.append("<h2>Points</h2>" + _html_table(shown(df), links))
    body += [f"<p class=fail>{html.escape(n)}</p>" for n in impossible_notes(df)]
    failed = df[df[schema.STATUS].isin(["failed", "oom"])]
    if not failed.empty:
        body.append("<h2>Failed points</h2><ul>" + "".join(
            f"<li class=fail>{p}. {html.escape(o)} (mesh {html.escape(m)}): {html.escape(e)}</li>"
            for p, o, m, e in failed[[schema.POINT, schema.OVERRIDES, schema.MESH,
                                      schema.ERROR]].itertuples(index=False)) + "</ul>")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write(sweep_dir: Path, header: dict, records: list[dict]) -> tuple[pd.DataFrame, Path]:
    """Write summary.csv, summary.md, the plots and report.html; returns (table, report path)."""
    df = summary_table(sweep_dir, records)
    (sweep_dir / SUMMARY_CSV).write_text(tables.to_csv(df))
    figures = []
    for name, plot in ((COLLECTIVE_PNG, sweep_plots.collective_bandwidth),
                       (MATMUL_PNG, sweep_plots.matmul_efficiency)):
        png = plot(df)
        if png:
            (sweep_dir / name).write_bytes(png)
            figures.append(name)
    (sweep_dir / SUMMARY_MD).write_text(
        f"# Sweep {header.get('name', '')}\n\n" + tables.to_markdown(shown(df))
        + "".join(f"\n> {n}\n" for n in impossible_notes(df))
        + "".join(f"\n![{name[:-4]}]({name})\n" for name in figures))
    report = sweep_dir / REPORT_HTML
    report.write_text(to_html(header, df, figures))
    log.info("sweep report %s", report)
    return df, report
