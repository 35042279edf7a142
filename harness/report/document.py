"""A run's report: the op table ranked by gap, per-category summary, workload figures, plots.

``render(run, fmt)`` gives text (terminal), md, html, csv or json of a ``harness.record.Run``.
Markdown references the plot files written next to it; HTML embeds them, so a report.html is
one self-contained file. Only those two draw the plots (``harness.report.drawn.plots``).
"""
from __future__ import annotations

import json
import math

import pandas as pd

from harness import schema
from harness.analysis.gaps import beats_roofline_reason
from harness.chip import spells
from harness.errors import HarnessError
from harness.measure.shares import ON_HOST
from harness.record import Run
from harness.report import collectives, drawn, heading, page, sections, tables
from harness.report.step import step_lines
from harness.units import json_text
from predictions.hardware import CHIPS

LEGEND_WIDTH = 100  # the text report's legends, wrapped

OP_COLUMNS = (schema.OP, schema.CATEGORY, schema.BOUND, schema.COUNT, schema.MEASURED_S,
              schema.WAIT_S, schema.PREDICTED_S, schema.EFFICIENCY, schema.GAP_S, schema.SHARE)
CATEGORY_COLUMNS = (schema.CATEGORY, schema.OPS_COUNT, schema.MEASURED_S, schema.PREDICTED_S,
                    schema.UNMODELED_S, schema.EFFICIENCY, schema.SHARE)


PROGRAM_COLUMNS = (schema.PROGRAM, schema.PROGRAM_ID, schema.EXECUTIONS, schema.MEASURED_S,
                   schema.PREDICTED_S, schema.EFFICIENCY, schema.TOTAL_S, schema.SHARE)
# the COLLECTIVES table as reports show it (its one-sentence why: harness explain, JSON, CSV;
# the op's name says its kind: all-gather.3), narrow enough for a 1024 px screen
EXPLAINED_COLUMNS = (schema.OP, schema.SOURCE_LINE, schema.MESH_AXES,
                     schema.DEVICE_BYTES, schema.REASON, schema.PREDICTED_S, schema.MEASURED_S,
                     schema.SPAN_S, schema.EXPOSED_COMM_S, schema.FIX)


def _programs(r) -> pd.DataFrame | None:
    """The run's programs table, when more than one program ran (else the title says it)."""
    p = getattr(r, "programs", None)
    return p if p is not None and len(p) > 1 else None


def _named(df: pd.DataFrame, columns: tuple) -> tuple:
    """``columns``, led by the program and its id where ``df``'s rows come from several."""
    many = len(df) and any(c in df.columns and df[c].nunique() > 1
                           for c in (schema.PROGRAM, schema.PROGRAM_ID))
    return ((schema.PROGRAM, schema.PROGRAM_ID) if many else ()) + columns


def _op_columns(r) -> tuple:
    """The op table's columns: with the program and its id when the ops come from several."""
    return _named(r.ops, OP_COLUMNS)


# summary figures a report explains in a sentence of their own (``explained``), not as a bare
# number in the figures line
_EXPLAINED = (schema.FLOPS_VS_COST_ANALYSIS, schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE)
# figures that mean nothing without FLOPs to count (a collective's step does none): the
# figure whose zero says so -> the figures it takes with it
_OF_FLOPS = {schema.MODEL_FLOPS: (schema.MODEL_FLOPS, schema.MFU, schema.MFU_BOOK,
                                  schema.MFU_FORMULA),
             schema.HLO_FLOPS_PER_DEVICE: (schema.HLO_FLOPS_PER_DEVICE, schema.HFU)}


def figures(summary: dict) -> list[tuple[str, object]]:
    """The summary figures a report shows, in order: those that apply (a figure with no value,
    and MFU or HFU where the step does no FLOPs, are left out, not shown as 0)."""
    moot = {k for key, keys in _OF_FLOPS.items() if not summary.get(key) for k in keys}
    return [(k, v) for k, v in summary.items()
            if k not in _EXPLAINED and k not in moot and v is not None
            and not (isinstance(v, float) and math.isnan(v))]


def _fmt_figure(k: str, v, spread: float = math.nan) -> str:
    return tables.fmt_figure(k, v) + tables.mark(k, v, spread)


def run_spread(r) -> float:
    """The spread of the calibration behind the run's chip (a CPU host's; NaN for a data-sheet
    chip or an older record): a figure above the roofline by less is within it
    (``harness.chip.spells``)."""
    return spells.spread_of(r.meta.get(schema.CALIBRATION))


def _label(k: str) -> str:
    return tables.Column(k, "", str).base


def flag_reason(r) -> str:
    """Why a figure of this run above its roofline cannot be right, for its chip."""
    name = r.meta.get(schema.CHIP) or getattr(r.chip, "name", "")
    kind = getattr(r.chip, "kind", "") or getattr(CHIPS.get(name), "kind", "")
    return beats_roofline_reason(name or "chip's", kind, run_spread(r))


def _versus(rel: float) -> str:
    return (f"within {abs(rel):.2%} of" if abs(rel) < 0.01 else
            f"{abs(rel):.0%} {'above' if rel > 0 else 'below'}")


def explained(r) -> list[str]:
    """Sentences for the figures a number alone would not explain: how the HLO's FLOPs compare
    with XLA's cost_analysis, and what a per-op time is on a host whose cores all devices
    share; and why a figure above its roofline is flagged."""
    out, s = [], r.summary
    rel = s.get(schema.FLOPS_VS_COST_ANALYSIS)
    if rel is not None:
        line = (f"FLOPs: the compiled program's, counted per op, are {_versus(rel)} XLA's "
                f"cost_analysis")
        once = s.get(schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE)
        if once is not None:
            line += (f", which counts each loop body once; counted that way, {_versus(once)} it")
        out.append(line)
    if r.meta.get(schema.OP_TIMING) in ON_HOST:
        out.append("op times are each op's share of a host whose cores every device shares (a "
                   "short execution's, its duration where less): an op's efficiency moves with "
                   "what runs beside it; the step line is the measure to trust")
    over = [f"{_label(k)} {tables.fmt_figure(k, v)}" for k, v in figures(s)
            if tables.flagged(k, v, run_spread(r))]
    if over:
        out.append(f"{tables.FLAG} {', '.join(over)}: {flag_reason(r)}")
    near = [f"{_label(k)} {tables.fmt_figure(k, v)}" for k, v in figures(s)
            if tables.mark(k, v, run_spread(r)) == tables.WITHIN]
    if near:
        out.append(f"{tables.WITHIN} {', '.join(near)}: {tables.within_meaning(run_spread(r))}")
    return out


def unmodeled_reasons(ops: pd.DataFrame, top: int = 10) -> list[tuple[str, str]]:
    """(op, why) for the unmodeled ops that say why (``schema.WHY_UNMODELED``), the most
    measured time first."""
    if schema.WHY_UNMODELED not in ops.columns:
        return []
    why = ops[schema.WHY_UNMODELED].fillna("").astype(str)
    rows = ops[(ops[schema.BOUND] == schema.UNMODELED) & (why != "")]
    rows = rows.sort_values(schema.MEASURED_S, ascending=False, kind="stable").head(top)
    return list(zip(rows[schema.OP], rows[schema.WHY_UNMODELED]))


def _step(r) -> list[str]:
    """The lines on the step as a whole that open every report."""
    return step_lines(getattr(r, "step", None) or {})


def _collectives(r) -> pd.DataFrame | None:
    """The collectives table with the op table's measured time and the timeline's span, each
    named for what it is (``harness.report.collectives``)."""
    return collectives.shown(getattr(r, "collectives", None), r.ops,
                             getattr(r, "step", None), r.meta)


def _tables(r, top: int | None) -> list[tuple[str, pd.DataFrame, tuple]]:
    """(heading, table, columns) of each table a report shows, in order."""
    ops = r.ops.head(top) if top else r.ops
    out = [(f"Ops ranked by gap (top {len(ops)} of {len(r.ops)})", ops, _op_columns(r)),
           ("By category", r.categories, CATEGORY_COLUMNS)]
    if _programs(r) is not None:
        out.append(("Programs", _programs(r), PROGRAM_COLUMNS))
    if r.unexpected is not None and not r.unexpected.empty:
        out.append(("Collectives the layout did not call for", r.unexpected,
                    tuple(r.unexpected.columns)))
    explained = _collectives(r)
    if explained is not None and len(explained):
        out.append(("Collectives explained, by exposed time", explained,
                    _named(explained, EXPLAINED_COLUMNS)))
    return out


def _shown(df: pd.DataFrame, columns) -> pd.DataFrame:
    """``columns`` of ``df`` as shown (``tables.shown``): its legend names only those."""
    return tables.shown(df[[c for c in columns if c in df.columns]])


def to_text(r: Run, top: int | None = 20) -> str:
    parts = [f"{line}\n" for line in [heading.title(r), *_step(r), *heading.meta_lines(r)]]
    shown_columns: dict = {}  # the tables' columns, for one legend under them all
    for i, (name, df, columns) in enumerate(_tables(r, top)):
        shown = _shown(df, columns)
        shown_columns.update(dict.fromkeys(shown.columns))
        parts.append(tables.to_text(shown, title=name if i else None, spread=run_spread(r)))
        if i == 0:
            parts += [f"unmodeled {op}: {why}\n" for op, why in unmodeled_reasons(r.ops)]
    for section in sections.shown(r):  # memory, serving loop, routing: their columns too
        parts.append(section.text(r))
        shown_columns.update(dict.fromkeys(section.legend(r)))
    parts.append(tables.legend_text(list(shown_columns), width=LEGEND_WIDTH, spread=run_spread(r))
                 + "\n")
    parts.append("  ".join(f"{_label(k)}: {_fmt_figure(k, v, run_spread(r))}"
                           for k, v in figures(r.summary))
                 + "\n")
    parts += [f"{line}\n" for line in explained(r)]
    parts += [f"note: {n}\n" for n in r.notes]
    return "".join(parts)


def _md_figures(r) -> str:
    return ("| figure | value | what it is |\n|---|---|---|\n" + "".join(
        f"| {_label(k)} | {_fmt_figure(k, v, run_spread(r))} | {schema.GLOSSARY.get(k, '')} |\n"
        for k, v in figures(r.summary)))


def to_markdown(r: Run, top: int | None = 30, plots: bool = True) -> str:
    out = [f"# {heading.title(r)}\n\n"] + [f"_{line}_  \n" for line in heading.meta_lines(r)]
    out += [f"\n**{line}**\n" if i == 0 else f"\n{line}\n" for i, line in enumerate(_step(r))]
    out.append("\n## Summary\n\n" + _md_figures(r))
    out += [f"\n{line}\n" for line in explained(r)]
    if r.notes:
        out.append("\n" + "".join(f"> {n}\n>\n" for n in r.notes))
    pngs = drawn.plots(r) if plots else {}
    out += [f"\n![{name[:-4]}]({name})\n" for name in drawn.PLOTS if name in pngs]
    for i, (name, df, columns) in enumerate(_tables(r, top)):
        shown = _shown(df, columns)
        out.append(f"\n## {name}\n\n" + tables.to_markdown(shown, run_spread(r)))
        out.append(f"\n_{tables.legend_text(shown.columns, spread=run_spread(r))}_\n")
        reasons = unmodeled_reasons(r.ops) if i == 0 else []
        if reasons:
            out.append("\n### Unmodeled ops: why\n\n" + "".join(f"- `{op}`: {why}\n"
                                                               for op, why in reasons))
    out += [section.markdown(r, pngs) for section in sections.shown(r)]
    return "".join(out)


def _html_figures(r) -> str:
    reason = flag_reason(r)
    rows = []
    for k, v in figures(r.summary):
        # a figure that is text (a formula) wraps like the other text cells: nowrap would push
        # the table past a 1024 px screen
        flag = (f' class=flag title="{page.esc(reason)}"' if tables.flagged(k, v, run_spread(r))
                else " class=text" if isinstance(v, str) else "")
        rows.append(f"<tr><td class=text>{page.esc(_label(k))}</td><td{flag}>"
                    f"{page.esc(_fmt_figure(k, v, run_spread(r)))}</td><td class=text>"
                    f"{page.esc(schema.GLOSSARY.get(k, ''))}</td></tr>")
    return ("<table><thead><tr><th class=text>figure</th><th>value</th><th class=text>what it "
            f"is</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def to_html(r: Run, top: int | None = 50, plots: bool = True) -> str:
    body = [page.heading(heading.title(r), heading.meta_lines(r), _step(r)),
            "<h2>Summary</h2>", _html_figures(r), page.paragraphs(explained(r)),
            page.paragraphs(r.notes, "note")]
    pngs = drawn.plots(r) if plots else {}
    body += [page.image(name, pngs[name]) for name in drawn.PLOTS if name in pngs]
    reason = flag_reason(r)
    for i, (name, df, columns) in enumerate(_tables(r, top)):
        body.append(f"<h2>{page.esc(name)}</h2>"
                    + page.table(df, columns, flag_reason=reason, spread=run_spread(r)))
        reasons = unmodeled_reasons(r.ops) if i == 0 else []
        if reasons:
            body.append("<h3>Unmodeled ops: why</h3><ul>" + "".join(
                f"<li><code>{page.esc(op)}</code>: {page.esc(why)}</li>" for op, why in reasons)
                + "</ul>")
    body += [section.html(r, pngs) for section in sections.shown(r)]
    return page.document(heading.title(r), body)


def to_json(r: Run, top: int | None = None) -> str:
    lifted = sections.json_objects(r, replacing=True)  # the memory section's, beside the meta
    out = {schema.TITLE: r.title, "meta": {k: v for k, v in r.meta.items() if k not in lifted},
           **lifted, schema.SUMMARY: r.summary,
           schema.NOTES: r.notes, schema.STEP_OBJECT: getattr(r, "step", None) or {},
           "ops": json.loads(r.ops.to_json(orient="records")),
           "categories": json.loads(r.categories.to_json(orient="records"))}
    programs = getattr(r, "programs", None)
    if programs is not None and len(programs):
        out["programs"] = json.loads(programs.to_json(orient="records"))
    explained = _collectives(r)
    if explained is not None and len(explained):
        out["collectives"] = json.loads(explained.to_json(orient="records"))
    out.update(sections.json_objects(r, replacing=False))  # an MoE's routing
    return json_text(out, indent=1) + "\n"  # strict: a NaN figure is null


FORMATS = {
    "text": to_text, "md": to_markdown, "html": to_html, "json": to_json,
    "csv": lambda r, top=None: tables.to_csv(r.ops),
}


# the formats that show the plots (the others never draw them)
PLOTTED = ("md", "html")


def render(r: Run, fmt: str = "text", top: int | None = None, plots: bool = True) -> str:
    """``r`` in format ``fmt``; ``top``: op rows shown (None: the format's default; 0: all);
    ``plots`` False: md and html without the plots (none is drawn)."""
    if fmt not in FORMATS:
        raise HarnessError(f"unknown report format {fmt!r}; choose from {sorted(FORMATS)}")
    options = {} if top is None else {"top": top or len(r.ops)}
    if fmt in PLOTTED:
        options["plots"] = plots
    return FORMATS[fmt](r, **options)
