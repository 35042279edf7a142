"""A run's report: the op table ranked by gap, per-category summary, workload figures, plots.

``render(run, fmt)`` gives text (terminal), md, html, csv or json of a Run (``harness.runs.run``;
any object with its title, meta, ops, categories, summary, notes, unexpected and ``figures()``).
Markdown references the plot files written next to it; HTML embeds them, so a report.html is
one self-contained file. Only those two draw the plots.
"""
from __future__ import annotations

import base64
import html
import json

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.report import tables
from harness.report.plots import CATEGORIES_PNG, ROOFLINE_PNG
from harness.report.step import step_lines
from harness.report.step_plot import STEP_PNG
from harness.shares import HOST_SHARE

OP_COLUMNS = (schema.OP, schema.CATEGORY, schema.BOUND, schema.COUNT, schema.MEASURED_S,
              schema.WAIT_S, schema.PREDICTED_S, schema.EFFICIENCY, schema.GAP_S, schema.SHARE)
CATEGORY_COLUMNS = (schema.CATEGORY, schema.OPS_COUNT, schema.MEASURED_S, schema.PREDICTED_S,
                    schema.UNMODELED_S, schema.EFFICIENCY, schema.SHARE)


PROGRAM_COLUMNS = (schema.PROGRAM, schema.PROGRAM_ID, schema.EXECUTIONS, schema.MEASURED_S,
                   schema.PREDICTED_S, schema.EFFICIENCY, schema.TOTAL_S, schema.SHARE)


def _programs(r) -> pd.DataFrame | None:
    """The run's programs table, when more than one program ran (else the title says it)."""
    p = getattr(r, "programs", None)
    return p if p is not None and len(p) > 1 else None


def _op_columns(r) -> tuple:
    """The op table's columns: with the program and its id when the ops come from several."""
    many = len(r.ops) and any(c in r.ops.columns and r.ops[c].nunique() > 1
                              for c in (schema.PROGRAM, schema.PROGRAM_ID))
    return ((schema.PROGRAM, schema.PROGRAM_ID) if many else ()) + OP_COLUMNS


# summary figures a report explains in a sentence of their own (``explained``), not as a bare
# number in the figures line
_EXPLAINED = (schema.FLOPS_VS_COST_ANALYSIS, schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE)


def _fmt_summary(summary: dict) -> list[tuple[str, str]]:
    return [(k, tables.fmt_figure(k, v)) for k, v in summary.items() if k not in _EXPLAINED]


def _versus(rel: float) -> str:
    return (f"within {abs(rel):.2%} of" if abs(rel) < 0.01 else
            f"{abs(rel):.0%} {'above' if rel > 0 else 'below'}")


def explained(r) -> list[str]:
    """Sentences for the figures a number alone would not explain: how the HLO's FLOPs compare
    with XLA's cost_analysis, and what a per-op time is on a host whose cores all devices
    share."""
    out, s = [], r.summary
    rel = s.get(schema.FLOPS_VS_COST_ANALYSIS)
    if rel is not None:
        line = (f"FLOPs: the compiled program's, counted per op, are {_versus(rel)} XLA's "
                f"cost_analysis")
        once = s.get(schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE)
        if once is not None:
            line += (f", which counts each loop body once; counted that way, {_versus(once)} it")
        out.append(line)
    if r.meta.get(schema.OP_TIMING) == HOST_SHARE:
        out.append("op times are each op's share of a host whose cores every device shares: an "
                   "op's efficiency moves with what runs beside it; the step line is the "
                   "measure to trust")
    return out


def _meta_line(meta: dict) -> str:
    keys = (schema.WORKLOAD, schema.PRESET, schema.CHIP, schema.DEVICE_KIND, schema.DEVICE_COUNT,
            schema.MESH, "backend", "jax_version", schema.GIT_SHA, schema.TIME)
    return ", ".join(f"{k}={meta[k]}" for k in keys if meta.get(k) not in (None, "", {}))


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


def to_text(r, top: int | None = 20) -> str:
    parts = [f"{line}\n" for line in _step(r)]
    parts += [tables.render(r.ops.head(top) if top else r.ops, "text", _op_columns(r))]
    parts += [f"unmodeled {op}: {why}\n" for op, why in unmodeled_reasons(r.ops)]
    parts.append(tables.render(r.categories, "text", CATEGORY_COLUMNS))
    if _programs(r) is not None:
        parts.append(tables.render(_programs(r), "text", PROGRAM_COLUMNS))
    parts.append("  ".join(f"{k}: {v}" for k, v in _fmt_summary(r.summary)) + "\n")
    parts += [f"{line}\n" for line in explained(r)]
    if r.unexpected is not None and not r.unexpected.empty:
        parts.append("Collectives the layout did not call for:\n"
                     + tables.render(r.unexpected, "text"))
    parts += [f"note: {n}\n" for n in r.notes]
    return f"{r.title}\n" + "".join(parts)


def to_markdown(r, top: int | None = 30, plots: bool = True) -> str:
    out = [f"# {r.title}\n", f"_{_meta_line(r.meta)}_\n"]
    out += [f"\n**{line}**\n" if i == 0 else f"\n{line}\n" for i, line in enumerate(_step(r))]
    out.append("\n## Summary\n")
    out.append("| figure | value |\n|---|---|\n" +
               "".join(f"| {k} | {v} |\n" for k, v in _fmt_summary(r.summary)))
    out += [f"\n{line}\n" for line in explained(r)]
    if r.notes:
        out.append("\n" + "".join(f"> {n}\n>\n" for n in r.notes))
    if r.unexpected is not None and not r.unexpected.empty:
        out.append("\n## Collectives the layout did not call for\n\n")
        out.append(tables.to_markdown(r.unexpected))
    out.append(f"\n## Ops ranked by gap (top {top})\n\n")
    out.append(tables.render(r.ops.head(top), "md", _op_columns(r)))
    reasons = unmodeled_reasons(r.ops)
    if reasons:
        out.append("\n## Unmodeled ops: why\n\n" + "".join(f"- `{op}`: {why}\n"
                                                          for op, why in reasons))
    out.append("\n## By category\n\n")
    out.append(tables.render(r.categories, "md", CATEGORY_COLUMNS))
    if _programs(r) is not None:
        out.append("\n## Programs\n\n")
        out.append(tables.render(_programs(r), "md", PROGRAM_COLUMNS))
    plots = r.figures() if plots else {}
    for name in (STEP_PNG, ROOFLINE_PNG, CATEGORIES_PNG):
        if name in plots:
            out.append(f"\n![{name[:-4]}]({name})\n")
    return "".join(out)


def _html_table(df: pd.DataFrame, columns) -> str:
    shown = df[[c for c in columns if c in df.columns]]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in shown.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(tables.formatter(c)(v))}</td>"
                         for c, v in zip(shown.columns, row)) + "</tr>"
        for row in shown.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def to_html(r, top: int | None = 50, plots: bool = True) -> str:
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;"
             "padding:3px 8px;text-align:right}th{background:#f4f4f4}"
             "td:first-child{text-align:left}.note{color:#8a5a00}"
             ".step{font-size:15px}.step:first-of-type{font-weight:600}")
    summary = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                      for k, v in _fmt_summary(r.summary))
    body = [f"<h1>{html.escape(r.title)}</h1><p><i>{html.escape(_meta_line(r.meta))}</i></p>"]
    body += [f"<p class=step>{html.escape(line)}</p>" for line in _step(r)]
    body.append(f"<h2>Summary</h2><table>{summary}</table>")
    body += [f"<p>{html.escape(line)}</p>" for line in explained(r)]
    body += [f"<p class=note>{html.escape(n)}</p>" for n in r.notes]
    if r.unexpected is not None and not r.unexpected.empty:
        body.append("<h2>Collectives the layout did not call for</h2>"
                    + _html_table(r.unexpected, r.unexpected.columns))
    plots = r.figures() if plots else {}
    for name in (STEP_PNG, ROOFLINE_PNG, CATEGORIES_PNG):
        if name in plots:
            b64 = base64.b64encode(plots[name]).decode()
            body.append(f'<p><img alt="{name}" src="data:image/png;base64,{b64}"></p>')
    body.append(f"<h2>Ops ranked by gap (top {top})</h2>"
                + _html_table(r.ops.head(top), _op_columns(r)))
    body.append("<h2>By category</h2>" + _html_table(r.categories, CATEGORY_COLUMNS))
    if _programs(r) is not None:
        body.append("<h2>Programs</h2>" + _html_table(_programs(r), PROGRAM_COLUMNS))
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(r.title)}"
            f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def to_json(r, top: int | None = None) -> str:
    out = {schema.TITLE: r.title, "meta": r.meta, schema.SUMMARY: r.summary,
           schema.NOTES: r.notes, schema.STEP_OBJECT: getattr(r, "step", None) or {},
           "ops": json.loads(r.ops.to_json(orient="records")),
           "categories": json.loads(r.categories.to_json(orient="records"))}
    programs = getattr(r, "programs", None)
    if programs is not None and len(programs):
        out["programs"] = json.loads(programs.to_json(orient="records"))
    return json.dumps(out, indent=1, default=str) + "\n"


FORMATS = {
    "text": to_text, "md": to_markdown, "html": to_html, "json": to_json,
    "csv": lambda r, top=None: tables.to_csv(r.ops),
}


# the formats that show the plots (the others never draw them)
PLOTTED = ("md", "html")


def render(r, fmt: str = "text", top: int | None = None, plots: bool = True) -> str:
    """``r`` in format ``fmt``; ``top``: op rows shown (None: the format's default; 0: all);
    ``plots`` False: md and html without the plots (none is drawn)."""
    if fmt not in FORMATS:
        raise HarnessError(f"unknown report format {fmt!r}; choose from {sorted(FORMATS)}")
    options = {} if top is None else {"top": top or len(r.ops)}
    if fmt in PLOTTED:
        options["plots"] = plots
    return FORMATS[fmt](r, **options)
