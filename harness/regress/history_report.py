"""``harness history``'s outputs: the history object (JSON, for a CI job), text for a terminal,
Markdown for a CI comment, and an HTML page (asv-style: one small trend plot per point with its
change points and commit ranges marked, ``harness.regress.history_plots``). Each names every
change point with its night, change, commit range and cause, then the newest night's verdict per
point; unstable points (their nights spread too wide to judge at the threshold) are listed apart.
"""
from __future__ import annotations

import math

import pandas as pd

from harness import schema
from harness.regress import judge
from harness.regress.trend import Trend
from harness.report import page, tables

GRID = ("<style>.trends{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));"
        "gap:.6em}.trends figure{margin:0}.trends figcaption{font-size:12px;"
        "overflow-wrap:anywhere}</style>")


def overall(trends: list[Trend]) -> str:
    """The worst verdict of the points' newest nights (``judge.VERDICTS`` order); ok for none."""
    found = {t.verdict for t in trends}
    return next((v for v in judge.VERDICTS if v in found), judge.OK)


def _num(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def point_object(t: Trend) -> dict:
    s = t.series
    a, b = t.stable
    return {"key": s.key, "figure": s.figure, schema.VERDICT: t.verdict, "cause": t.cause,
            "message": t.message, schema.CHANGE: _num(t.change), schema.P_VALUE: _num(t.p_value),
            "s": _num(t.s), "stable": [s.nights[a].name, s.nights[b - 1].name] if b > a else [],
            "changes": [c.to_dict() for c in t.changes],
            schema.NIGHTS: [{schema.NIGHT: n.name, schema.GIT_SHA: n.commit,
                             schema.TIME: n.date, "runs": len(n.runs),
                             schema.WALL_STEP_S: _num(n.wall), schema.CPU_STEP_S: _num(n.cpu),
                             schema.EFFICIENCY: _num(n.efficiency),
                             schema.SPREAD: _num(n.spread)}
                       for n in s.nights]}


def nights(trends: list[Trend]) -> list[str]:
    """Every night's name, in order of its first run."""
    first: dict[str, str] = {}
    for t in trends:
        for n in t.series.nights:
            first[n.name] = min(first.get(n.name, n.date), n.date)
    return sorted(first, key=lambda name: (first[name], name))


def history_object(root: str, trends: list[Trend]) -> dict:
    """The history as one JSON object: the overall verdict, the nights, each point's."""
    return {schema.VERDICT: overall(trends), "root": root, "nights": nights(trends),
            "changes": sum(len(t.changes) for t in trends),
            "points": [point_object(t) for t in trends],
            "unstable": [t.series.key for t in trends if t.verdict == judge.UNSTABLE]}


def change_rows(trends: list[Trend]) -> pd.DataFrame:
    """One row per change point, newest night first."""
    cols = ["benchmark", schema.NIGHT, schema.CHANGE, "p", schema.COMMITS, schema.CAUSE, "what"]
    rows = [dict(zip(cols, (t.series.key, c.after.name, f"{c.change:+.0%}", f"{c.p_value:.3f}",
                            c.commits, c.cause, c.what)))
            for t in trends for c in t.changes]
    return pd.DataFrame(rows, columns=cols).sort_values(schema.NIGHT, ascending=False,
                                                        kind="stable")


def verdict_rows(trends: list[Trend]) -> pd.DataFrame:
    """One row per point judged (unstable ones apart), the worst first."""
    order = {v: i for i, v in enumerate(judge.VERDICTS)}
    cols = [schema.VERDICT, "benchmark", schema.NIGHTS, "newest", schema.CAUSE, "message"]
    rows = [dict(zip(cols, (t.verdict, t.series.key, len(t.series.nights),
                            f"{t.change:+.1%}" if math.isfinite(t.change) else "-", t.cause,
                            t.message)))
            for t in sorted(trends, key=lambda t: order.get(t.verdict, 9))
            if t.verdict != judge.UNSTABLE]
    return pd.DataFrame(rows, columns=cols)


def unstable_lines(trends: list[Trend]) -> list[str]:
    return [f"{t.series.key} (s={t.s:.3f}, {t.series.figure}, "
            f"{t.stable[1] - t.stable[0]} nights)" for t in trends if t.verdict == judge.UNSTABLE]


def headline(root: str, trends: list[Trend]) -> list[str]:
    names = nights(trends)
    n = len(names)
    span = f" ({names[0]} to {names[-1]})" if n else ""
    worst = overall(trends)
    count = sum(t.verdict == worst for t in trends)
    return [f"newest night: {worst}" + (f" ({count} of {len(trends)} points)"
                                        if worst != judge.OK else ""),
            f"{len(trends)} points over {n} nights under {root}{span}; "
            f"{sum(len(t.changes) for t in trends)} change point(s)"]


def render(root: str, trends: list[Trend], fmt: str) -> str:
    """Text (the headline last) or Markdown (the headline first)."""
    md = fmt == "md"
    out = [f"**{headline(root, trends)[0]}**", headline(root, trends)[1]] if md else []
    for title, df in (("change points", change_rows(trends)),
                      ("newest night per point", verdict_rows(trends))):
        if len(df):
            out += [f"\n### {title}\n" if md else f"{title}:",
                    (tables.to_markdown if md else tables.to_text)(df).rstrip()]
    shaky = unstable_lines(trends)
    if shaky:
        out += [("\n" if md else "") + "unstable (too noisy to judge at the threshold; not a "
                "regression, not ok):", *(f"- {x}" if md else f"  {x}" for x in shaky)]
    if not md:
        out += headline(root, trends)[::-1]
    return "\n".join(out) + "\n"


def html(root: str, trends: list[Trend]) -> str:
    """The page: headline, change points, verdicts, one trend plot per point, unstable apart."""
    from harness.regress.history_plots import trend_plot

    lines = headline(root, trends)
    body = [GRID, page.heading(f"History: {root}", lines[1:], lines[:1])]
    changes = change_rows(trends)
    if len(changes):
        body += ["<h2>Change points</h2>", page.table(changes)]
    body += ["<h2>The newest night per point</h2>", page.table(verdict_rows(trends))]
    figs = []
    order = {v: i for i, v in enumerate(judge.VERDICTS)}
    for t in sorted(trends, key=lambda t: (not t.changes, order.get(t.verdict, 9))):
        png = trend_plot(t)
        if png is not None:
            cap = t.series.key + "".join(f"; {c.after.name}: {c.commits}" for c in t.changes)
            figs.append(page.image(t.series.key, png).replace(
                "</figure>", f"<figcaption>{page.esc(cap)}</figcaption></figure>"))
    body += ["<h2>Trends</h2><div class=trends>", *figs, "</div>"]
    shaky = unstable_lines(trends)
    if shaky:
        body += ["<h2>Unstable points</h2>",
                 page.paragraphs(["too noisy to judge at the threshold; not a regression, "
                                  "not ok:", *shaky], "note")]
    return page.document(f"History: {root}", body)
