"""``harness compare [BASELINE] CANDIDATE``: one verdict per pair of runs, its cause first
(``harness.regress.judge``), and one overall.

Each side is a run, a sweep or any directory of saved runs (``results/``, a pytest
``--harness-save`` directory), or a run id under ``--root``; runs pair by what they are runs of
(``harness.regress.pairs``). With CANDIDATE alone, ``--baseline`` picks its baseline under
``--root``: latest, a commit or a date. Exit codes: 0 no regression (inconclusive included), 1 a
regression, 2 bad input. ``--json FILE`` writes the verdict object, ``--junit FILE`` one test
case per pair (a regression fails it, an inconclusive one is skipped).
"""
from __future__ import annotations

import argparse
import json
import math
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pandas as pd

from harness import schema
from harness.commands import count
from harness.errors import HarnessError
from harness.regress import changes, judge, pairs, side_by_side
from harness.report import tables
from harness.runs import store
from harness.units import fmt_seconds

EXIT_OK, EXIT_REGRESSION = 0, 1


def fail_on(text: str) -> tuple[str, float]:
    """``step=10%`` or ``efficiency=0.05`` -> (metric, fraction)."""
    name, _, value = text.partition("=")
    try:
        return name, float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give METRIC=PCT, e.g. step=10% (metrics: {', '.join(judge.METRICS)})"
        ) from None


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="BASELINE CANDIDATE, each a run, a sweep or a directory of runs (or a "
                        "run id under --root); CANDIDATE alone: the baseline from --baseline")
    p.add_argument("--baseline", metavar="WHICH",
                   help="with CANDIDATE alone, its baseline under --root: latest (default), a "
                        "commit (hex prefix) or a date (YYYY-MM-DD: that day's or before)")
    p.add_argument("--root", type=Path, default=Path("results"),
                   help="where run ids and --baseline are looked up (default results/)")
    p.add_argument("--fail-on", type=fail_on, action="append", metavar="METRIC=PCT",
                   help="a regression: the metric worse by more than this, beyond noise "
                        f"(default step=10%%; {'; '.join(judge.METRICS.values())})")
    for name, what in (("alpha", "one-sided level of each test"),
                       ("host", "the probe's speed moving more: a host that moved"),
                       ("noise", "run-to-run sd of a log median step")):
        p.add_argument(f"--{name}", type=float, default=getattr(judge.Rule, name),
                       help=f"{what} (default {getattr(judge.Rule, name)})")
    p.add_argument("--format", choices=("text", "md", "json"), default="text")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the verdict object")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write a JUnit XML file")
    p.add_argument("--top", type=count, default=5, help="ops shown per pair (default 5; 0 = all)")


def _side(ref: str, root: Path) -> list:
    p = Path(ref)
    return pairs.load_all(p if p.exists() or p.is_absolute() or len(p.parts) > 1
                          else store.resolve(ref, root))


def collect(args) -> tuple[judge.Rule, list, list, list, tuple[str, str]]:
    """(the rule, verdicts, unpaired baseline runs, unpaired candidate runs, the two sides)."""
    if len(args.runs) > 2 or (len(args.runs) == 2 and args.baseline):
        raise HarnessError("give BASELINE CANDIDATE, or CANDIDATE with --baseline")
    rule = judge.Rule(tuple(args.fail_on or judge.Rule.fail_on), args.alpha, args.host,
                        args.noise)
    cand = _side(args.runs[-1], args.root)
    if len(args.runs) == 2:
        base, name = _side(args.runs[0], args.root), args.runs[0]
    else:
        which = args.baseline or pairs.LATEST
        base, name = pairs.choose(args.root, which, cand), f"{which} under {args.root}"
    paired, only_b, only_c = pairs.pair(base, cand)
    if not paired:
        raise HarnessError(f"no run of {args.runs[-1]} has a baseline run of the same test or "
                           f"workload in {name}")
    # two runs named: two layouts of one model (pairs.pair pairs them whatever they ran)
    named = len(args.runs) == 2 and len(base) == 1 and len(cand) == 1
    return (rule, [judge.compare(a, b, rule, layouts_first=named) for a, b in paired],
            only_b, only_c, (name, args.runs[-1]))


def headline(verdicts: list) -> str:
    """The last line: the overall verdict, and the pairs that gave it."""
    n, worst = Counter(v.verdict for v in verdicts), judge.overall(verdicts)
    named = [v.name for v in verdicts if v.verdict == worst][:5] if worst != judge.OK else []
    return (f"{worst.upper()}: " + ", ".join(f"{n[k]} {k}" for k in judge.VERDICTS if n[k])
            + f" of {len(verdicts)} pair(s)" + (f" ({', '.join(named)})" if named else ""))


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


def render(fmt: str, verdicts, only_b, only_c, names, top: int) -> str:
    """The text report (a terminal), or markdown (a CI comment): the headline last or first."""
    md = fmt == "md"
    out = ([f"## harness compare: `{names[0]}` → `{names[1]}`", "", "**{}**: {}".format(
        *headline(verdicts).split(": ", 1))] if md else
           [f"harness compare: {names[0]} -> {names[1]}"])
    for v in verdicts:
        out += ["", f"{'### ' if md else ''}{v.name}: {v.verdict.upper()} ({v.cause})",
                f"{'' if md else '  '}{v.message}"]
        out += [f"{'- ' if md else '  '}differs: {d}" for d in v.met]
        lay = v.layouts
        if lay is not None:
            out += [f"{'- ' if md else '  '}A: {v.baseline.path}; B: {v.candidate.path}; ops "
                    f"matched by {lay.matched_by} and category"]
            out += [f"{'- ' if md else '  '}{line}" for line in _unmatched(lay, top)]
        shown = ([tables_of(v, top)[0], *layout_tables(lay, top)] if lay is not None
                 else tables_of(v, top))
        out += [("\n" if md else "") + (tables.to_markdown if md else tables.to_text)(t).rstrip()
                for t in shown if len(t)]
    return "\n".join(out + [""] + _unpaired(only_b, only_c)
                     + ([] if md else [headline(verdicts)])) + "\n"


def junit(verdicts) -> str:
    """One test case per pair: a regression fails, an inconclusive one is skipped."""
    n = Counter(v.verdict for v in verdicts)
    suite = ET.Element("testsuite", name="harness compare", tests=str(len(verdicts)),
                       failures=str(n[judge.REGRESSION]), skipped=str(n[judge.INCONCLUSIVE]))
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname="harness.analysis.gaps", name=v.name)
        tag = {judge.REGRESSION: "failure", judge.INCONCLUSIVE: "skipped"}.get(v.verdict)
        if tag:
            ET.SubElement(case, tag, message=f"{v.verdict} ({v.cause})").text = v.message
        ET.SubElement(case, "system-out").text = f"{v.verdict} ({v.cause}): {v.message}"
    return ET.tostring(suite, encoding="unicode") + "\n"


def main(args) -> int:
    rule, verdicts, only_b, only_c, names = collect(args)
    obj = {schema.VERDICT: judge.overall(verdicts), "headline": headline(verdicts),
           "baseline": names[0], "candidate": names[1],
           "rule": {"fail_on": dict(rule.fail_on), "alpha": rule.alpha, "host": rule.host,
                    "noise": rule.noise},
           "pairs": [v.to_dict(args.top) for v in verdicts],
           "unpaired": {"baseline": [str(r.path) for r in only_b],
                        "candidate": [str(r.path) for r in only_c]}}
    if args.json:
        args.json.write_text(json.dumps(obj, indent=2) + "\n")
    if args.junit:
        args.junit.write_text(junit(verdicts))
    print(json.dumps(obj, indent=2) if args.format == "json" else
          render(args.format, verdicts, only_b, only_c, names, args.top), end="\n"
          if args.format == "json" else "")
    return EXIT_REGRESSION if obj[schema.VERDICT] == judge.REGRESSION else EXIT_OK
