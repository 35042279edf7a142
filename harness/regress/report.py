"""``harness compare``'s report of a ``Comparison``: text for a terminal (the headline last) or
Markdown for a CI comment (the headline first); per pair its verdict, cause and message, its
step figures and the ops that lost most, and for two layouts of one model their op groups and
collectives side by side (``harness.regress.side_by_side``)."""
from __future__ import annotations

import math

import pandas as pd

from harness import schema
from harness.regress import changes, judge, pairs, side_by_side
from harness.regress.comparison import Comparison, headline
from harness.report import tables
from harness.units import fmt_seconds


def _pct(x, sign="+") -> str:
    return f"{x:{sign}.0%}" if isinstance(x, float) and math.isfinite(x) else "-"


def tables_of(v, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A pair's step figures and its ops (the ``top`` that lost most), formatted."""
    f, o = v.figures, v.ops if top <= 0 else v.ops.head(top)
    secs = fmt_seconds
    return (pd.DataFrame({"figure": f[schema.FIGURE], "baseline": f[schema.BASELINE_S].map(secs),
                          "candidate": f[schema.CANDIDATE_S].map(secs),
                          "change": f[schema.CHANGE].map(_pct)}),
            pd.DataFrame({"op": o[schema.OP], "category": o[schema.CATEGORY].fillna(""),
                          "baseline": o[schema.BASELINE_S].map(secs),
                          "candidate": o[schema.CANDIDATE_S].map(secs),
                          "change": o[schema.CHANGE].map(_pct),
                          "work": o[schema.WORK_CHANGE].map(_pct),
                          "eff. before": o[schema.BASELINE_EFFICIENCY].map(lambda e: _pct(e, "")),
                          "eff. after": o[schema.CANDIDATE_EFFICIENCY].map(lambda e: _pct(e, ""))}))


def layout_tables(lay, top: int) -> list[pd.DataFrame]:
    """Two layouts' op groups (matched by source op, ``top`` that changed most) and their
    collectives side by side, formatted (``harness.regress.side_by_side``)."""
    secs, o, c = fmt_seconds, lay.ops, lay.collectives
    o = o.reindex(o[schema.DELTA_S].abs().sort_values(ascending=False, kind="stable").index)
    o = o if top <= 0 else o.head(top)  # the groups whose time changed most

    def eff(e):
        return _pct(e, "")

    def nbytes(x):
        return tables.fmt_figure(schema.COMM_BYTES, x)

    def size(n):
        return f"{int(n)}" if changes.finite(n) and n > 1 else "-"

    return [pd.DataFrame({"source op": o[schema.OP].map(_short), "category": o[schema.CATEGORY],
                          "ops A": o[schema.OPS_MATCHED + "_a"],
                          "ops B": o[schema.OPS_MATCHED + "_b"],
                          "A": o[schema.BASELINE_S].map(secs), "B": o[schema.CANDIDATE_S].map(secs),
                          "change": o[schema.CHANGE].map(_pct),
                          "eff. A": o[schema.BASELINE_EFFICIENCY].map(eff),
                          "eff. B": o[schema.CANDIDATE_EFFICIENCY].map(eff)}),
            pd.DataFrame({"collective": c[schema.COLLECTIVE],
                          "from": c[schema.SOURCE_OP].map(_short),
                          "line": c[schema.SOURCE_LINE].replace("", "-"),
                          "devices": c[schema.GROUP_SIZE].map(size),
                          "axes": c[schema.AXES].replace("", "-"), "where": c[schema.SIDE],
                          "A": c[schema.BASELINE_S].map(secs), "B": c[schema.CANDIDATE_S].map(secs),
                          "exposed A": c[schema.EXPOSED_COMM_S + "_a"].map(secs),
                          "exposed B": c[schema.EXPOSED_COMM_S + "_b"].map(secs),
                          "bytes A": c[schema.COMM_BYTES + "_a"].map(nbytes),
                          "bytes B": c[schema.COMM_BYTES + "_b"].map(nbytes)})]


def wait_verdicts(v) -> list[str]:
    """Each run's verdict on why its devices wait (``harness.step.verdict``), where either has
    one: ``waits: baseline dispatch-bound: ...; candidate none dominates``."""
    said = [(name, getattr(run, "step", {}).get(schema.WAIT_VERDICT))
            for name, run in (("baseline", v.baseline), ("candidate", v.candidate))]
    if not any(line for _, line in said):
        return []
    return [f"waits: {name} {line or 'no cause dominates'}" for name, line in said]


def _short(text: str, width: int = 72) -> str:
    """A long source op (a combined collective's ``(a:b:c)``) cut in the middle, for a table."""
    return text if len(text) <= width else f"{text[:width // 2 - 2]} ... {text[-(width // 2 - 3):]}"


def _first(rows: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` rows with the most time in either run (all for 0)."""
    t = rows[schema.BASELINE_S].fillna(rows[schema.CANDIDATE_S])
    rows = rows.loc[t.sort_values(ascending=False, kind="stable").index]
    return rows if top <= 0 else rows.head(top)


def _unmatched(lay, top: int) -> list[str]:
    """One line per layout: the op groups that ran in it alone (the ``top`` with most time)."""
    return [f"only in {name}: " + ", ".join(
        f"{_short(r[schema.OP])} ({r[schema.COLLECTIVE] or r[schema.CATEGORY]}, "
        f"{r[schema.OPS_MATCHED + suffix]} op(s), "
        f"{fmt_seconds(r[schema.CANDIDATE_S if suffix == '_b' else schema.BASELINE_S])})"
        for _, r in _first(lay.unmatched(side), top).iterrows())
        + (f" and {len(lay.unmatched(side)) - top} more" if 0 < top < len(lay.unmatched(side))
           else "")
        for name, side, suffix in _SIDES
        if len(lay.unmatched(side))]


_SIDES = (("A", side_by_side.ONLY_A, "_a"), ("B", side_by_side.ONLY_B, "_b"))


def _unpaired(only_b, only_c) -> list[str]:
    return [f"{side} only (unpaired): {', '.join(sorted(pairs.key(r) for r in runs))}"
            for side, runs in (("baseline", only_b), ("candidate", only_c)) if runs]


def _unstable(verdicts) -> list[str]:
    """The unstable points, listed apart with their own spread (``harness.regress.noise``)."""
    shaky = [v for v in verdicts if v.verdict == judge.UNSTABLE]
    return ["unstable (too noisy to judge at the threshold; not a regression, not ok): "
            + ", ".join(f"{v.name} (s={v.noise['s']:.3g}, {v.noise['figure']}, "
                        f"{v.noise['runs']} runs)" for v in shaky)] if shaky else []


def render(c: Comparison, fmt: str, top: int) -> str:
    """The text report (a terminal), or markdown (a CI comment): the headline last or first."""
    md, verdicts, names = fmt == "md", c.verdicts, c.names
    out = ([f"## harness compare: `{names[0]}` → `{names[1]}`", "", "**{}**: {}".format(
        *headline(verdicts).split(": ", 1))] if md else
           [f"harness compare: {names[0]} -> {names[1]}"])
    for v in verdicts:
        out += ["", f"{'### ' if md else ''}{v.name}: {v.verdict.upper()} ({v.cause})",
                f"{'' if md else '  '}{v.message}"]
        out += [f"{'- ' if md else '  '}differs: {d}" for d in v.met]
        out += [f"{'- ' if md else '  '}{line}" for line in wait_verdicts(v)]
        lay = v.layouts
        if lay is not None:
            out += [f"{'- ' if md else '  '}A: {v.baseline.path}; B: {v.candidate.path}; ops "
                    f"matched by {lay.matched_by} and category"]
            out += [f"{'- ' if md else '  '}{line}" for line in _unmatched(lay, top)]
        shown = ([tables_of(v, top)[0], *layout_tables(lay, top)] if lay is not None
                 else tables_of(v, top))
        out += [("\n" if md else "") + (tables.to_markdown if md else tables.to_text)(t).rstrip()
                for t in shown if len(t)]
    return "\n".join(out + [""] + _unpaired(c.only_baseline, c.only_candidate)
                     + _unstable(verdicts)
                     + ([] if md else [headline(verdicts)])) + "\n"
