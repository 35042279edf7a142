"""``harness compare [BASELINE] CANDIDATE``: one verdict per pair of runs, its cause first
(``harness.regress.judge``), and one overall (``harness.regress.comparison``; the report:
``harness.regress.report``).

Each side is a run, a sweep or any directory of saved runs (``results/``, a pytest
``--harness-save`` directory), or a run id under ``--root``; runs pair by what they are runs of
(``harness.regress.pairs``). With CANDIDATE alone, ``--baseline`` picks its baseline under
``--root``: latest, a commit or a date. Exit codes: 0 no regression (inconclusive and unstable
included), 1 a regression, 2 bad input. ``--json FILE`` writes the verdict object, ``--junit
FILE`` one test case per pair (a regression fails it, an inconclusive or unstable one is
skipped). ``--confirm N`` reruns each workload run that looks like a regression before its
verdict (``harness.regress.confirm``): the documented nightly job passes ``--confirm 3``
(one run a side and no confirmation called a tiny all-reduce a regression in 2 of 4 A/A
comparisons of one commit's quick sweeps; confirmed, in none), so it stays explicit here: a
compare that reruns workloads unasked would time other code than a user meant, and cost a night.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness import schema
from harness.commands import add_format, count, deprecated, level
from harness.errors import HarnessError
from harness.regress import judge
from harness.regress.comparison import compare_sides, junit, verdict_object
from harness.regress.report import render
from harness.units import json_text

EXIT_OK, EXIT_REGRESSION = 0, 1
# checked before the runs are read (harness.commands.check_options)
CHECKED = {"json": "file", "junit": "file"}


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
    p.add_argument("--root", type=Path, default=Path("results"), metavar="DIR",
                   help="where run ids and --baseline are looked up (default results/)")
    p.add_argument("--fail-on", type=fail_on, action="append", metavar="METRIC=PCT",
                   help="a regression: the metric worse by more than this, beyond noise "
                        f"(default step=10%%; {'; '.join(judge.METRICS.values())})")
    p.add_argument("--alpha", type=level, default=judge.Rule.alpha, metavar="P",
                   help=f"one-sided level of each test (default {judge.Rule.alpha})")
    p.add_argument("--host-change", dest="host", type=float, default=judge.Rule.host,
                   metavar="FRACTION",
                   help="the probe's speed moving more than this: a host that moved (default "
                        f"{judge.Rule.host})")
    deprecated(p, "--host", "--host-change", dest="host", type=float)
    p.add_argument("--noise", type=float, default=judge.Rule.noise, metavar="SD",
                   help="run-to-run sd of a log median step, for a point with fewer than 3 runs "
                        f"of one code (else its own spread) (default {judge.Rule.noise})")
    p.add_argument("--confirm", type=count, default=0, metavar="N",
                   help="rerun each workload run that looks like a regression or is "
                        "inconclusive (slower, within the noise) N times in fresh "
                        "processes (stored under --root/confirmations) before its verdict "
                        "(default 0: no reruns; a nightly job: 2, docs/regression.md)")
    add_format(p, ("text", "md", "json"))
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the verdict object as JSON here")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write a JUnit XML file")
    p.add_argument("--top", type=count, default=5, metavar="N",
                   help="ops shown per pair (default 5; 0 = all)")


def main(args) -> int:
    if len(args.runs) > 2 or (len(args.runs) == 2 and args.baseline):
        raise HarnessError("give BASELINE CANDIDATE, or CANDIDATE with --baseline")
    rule = judge.Rule(tuple(args.fail_on or judge.Rule.fail_on), args.alpha, args.host,
                      args.noise)
    comparison = compare_sides(args.runs[-1], args.runs[0] if len(args.runs) == 2 else None,
                               args.root, rule, args.baseline, args.confirm)
    obj = verdict_object(comparison, args.top)
    if args.json:
        args.json.write_text(json_text(obj, indent=2) + "\n")
    if args.junit:
        args.junit.write_text(junit(comparison.verdicts))
    print(json_text(obj, indent=2) if args.format == "json" else
          render(comparison, args.format, args.top), end="\n" if args.format == "json" else "")
    return EXIT_REGRESSION if obj[schema.VERDICT] == judge.REGRESSION else EXIT_OK
