"""``harness history ROOT``: each point's series over the nights kept under ROOT
(``harness.regress.history``), its change points, each with its commit range and cause
(``harness.regress.code_changes``: the verdict's own test where the code changed, then
``harness.regress.changepoints``: E-divisive means), and the newest night judged against the
last stable segment up to the last night of another code (``harness.regress.trend``); the
outputs: ``harness.regress.history_report``.

ROOT holds one directory per night (a sweep's directory, a pytest ``--harness-save``
directory). ``--confirm N`` reruns each point whose newest night looks like a regression, N
times in fresh processes, stored in that night's directory, and judges the night with them
(``trend.confirm_newest``). Exit codes: 0 no regression (inconclusive and unstable included),
1 the newest night is a regression against the last stable segment of some point, 2 bad input.
``--html FILE`` writes the page (one trend plot per point), ``--json FILE`` the history object.
"""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import add_format, count, level
from harness.commands.compare import EXIT_OK, EXIT_REGRESSION, fail_on
from harness.errors import HarnessError
from harness.regress import changepoints, history, history_report, judge, trend
from harness.units import json_text

# checked before the runs are read (harness.commands.check_options)
CHECKED = {"json": "file", "html": "file"}


def _night_dir(root: Path, t: trend.Trend) -> Path:
    """The newest night's directory under ``root`` (``root`` itself for loose runs)."""
    d = root / t.series.nights[-1].name
    return d if d.is_dir() else root


def add_arguments(p) -> None:
    p.add_argument("root", type=Path, metavar="ROOT",
                   help="a directory of nights, one directory per night (a sweep's, a pytest "
                        "--harness-save directory), e.g. results/nights")
    p.add_argument("--fail-on", type=fail_on, action="append", metavar="METRIC=PCT",
                   help="the newest night a regression: the metric worse than the last stable "
                        f"segment by more than this, beyond noise (default step=10%%; "
                        f"{'; '.join(judge.METRICS.values())})")
    p.add_argument("--alpha", type=level, default=judge.Rule.alpha, metavar="P",
                   help=f"one-sided level of the newest night's test (default {judge.Rule.alpha})")
    p.add_argument("--significance", type=level, default=changepoints.ALPHA, metavar="P",
                   help="significance level of each change point's permutation test (default "
                        f"{changepoints.ALPHA})")
    p.add_argument("--noise", type=float, default=judge.Rule.noise, metavar="SD",
                   help="run-to-run sd of a log median step, for a segment of fewer than "
                        f"{history.MIN_NIGHTS} nights (default {judge.Rule.noise})")
    p.add_argument("--confirm", type=count, default=0, metavar="N",
                   help="rerun each point whose newest night looks like a regression N times in "
                        "fresh processes (stored in that night's directory, under "
                        "confirmations/, so that they pool into it) before its verdict (default "
                        "0: no reruns)")
    add_format(p, ("text", "md", "json"))
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the history object as JSON here")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write the page: one trend plot per point, change points marked")


def main(args) -> int:
    if not args.root.is_dir():
        raise HarnessError(f"{args.root}: no such directory of nights")
    rule = judge.Rule(tuple(args.fail_on or judge.Rule.fail_on), args.alpha, judge.Rule.host,
                      args.noise)
    points = history.load(args.root)
    if not points:
        raise HarnessError(f"{args.root}: holds no runs (no meta.json under it)")
    trends = [trend.judge_trend(s, rule, args.significance) for s in points.values()]
    if args.confirm:
        trends = [trend.confirm_newest(t, args.confirm,
                                       _night_dir(args.root, t) / "confirmations", rule,
                                       args.significance)
                  if t.verdict == judge.REGRESSION else t for t in trends]
    obj = history_report.history_object(str(args.root), trends)
    if args.json:
        args.json.write_text(json_text(obj, indent=2) + "\n")
    if args.html:
        args.html.write_text(history_report.html(str(args.root), trends))
    print(json_text(obj, indent=2) if args.format == "json" else
          history_report.render(str(args.root), trends, args.format), end="\n"
          if args.format == "json" else "")
    return EXIT_REGRESSION if obj[schema.VERDICT] == judge.REGRESSION else EXIT_OK
