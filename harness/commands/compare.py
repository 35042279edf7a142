"""``harness compare BASELINE [BASELINE ...] CANDIDATE``: noise-aware per-op verdicts; exit 1 on
a regression. Several baselines (earlier runs of the same code, oldest first) judge each op by its
own run-to-run spread (``harness.runs.history``).

Exit codes: 0 no regression (``inconclusive`` verdicts included: the data could not decide, the
headline says so), 1 at least one regression (a nightly CI job fails), 2 bad input (missing or
damaged run, bad option). The rule and its false-alarm rate: ``harness.runs.regress``. ``--format
md`` prints a heading, the verdict and a table: a CI comment. Both say what the comparison could
have seen: per op, the smallest slowdown of it alone that would have been flagged (``flags
from``, ``harness.runs.detect``), and a line for the largest ops. ``csv`` and ``json`` print
only the table (all columns), the verdict goes to stderr.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness import schema
from harness.commands import count
from harness.report import tables
from harness.runs import regress, store
from harness.runs.explain import finite
from harness.runs.run import Run

EXIT_OK, EXIT_REGRESSION = 0, 1


def add_arguments(p) -> None:
    p.add_argument("baseline", nargs="+",
                   help="baseline run: a run directory, or a run id (prefix) under --root; "
                        "several (oldest first, e.g. the last nightly runs): each op is judged "
                        "by its own spread over them")
    p.add_argument("candidate", help="candidate run, same forms as BASELINE")
    p.add_argument("--threshold", type=float, default=0.10,
                   help="relative slowdown that counts (default 0.10 = 10%%)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="false discovery rate over the tested ops (Benjamini-Hochberg; "
                        "default 0.05)")
    p.add_argument("--min-share", type=float, default=0.01,
                   help="ops below this share of the step in both runs never flag (default 0.01)")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")
    p.add_argument("--top", type=count, default=20,
                   help="op rows to print (default 20; 0 = all); regressions are always printed")
    p.add_argument("--root", type=Path, default=Path("results"),
                   help="where run ids are looked up (default results/)")


def _pct(x) -> str:
    return "-" if not finite(x) else f"{x:.0%}"


def _signed(x) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "+inf"
    return "-" if not finite(x) else f"{x:+.0%}"


def _detectable(x) -> str:
    """A ``detectable`` value as the slowdown it names ("never": too few steps)."""
    if isinstance(x, float) and math.isinf(x):
        return "never"
    return "-" if not finite(x) else f"+{x:.0%}"


def _text(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


# Columns shown by text/md: (column, header, display formatter).
SHOWN: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    (schema.PROGRAM, "program", _text),
    (schema.OP, "op", _text),
    (schema.CATEGORY, "category", _text),
    (schema.BOUND, "bound", _text),
    (schema.BASELINE_S, "baseline", tables.fmt_seconds),
    (schema.CANDIDATE_S, "candidate", tables.fmt_seconds),
    (schema.CHANGE, "change", _signed),
    (schema.BASELINE_EFFICIENCY, "eff. before", _pct),
    (schema.CANDIDATE_EFFICIENCY, "eff. after", _pct),
    (schema.Q_VALUE, "q", lambda q: f"{q:.2g}" if finite(q) else "-"),
    (schema.DETECTABLE, "flags from", _detectable),
    (schema.VERDICT, "verdict", _text),
    (schema.NOTE, "note", _text),
)


def shown_rows(verdicts, top: int) -> tuple[pd.DataFrame, int]:
    """The workload row and the first ``top`` op rows (never fewer than the regressions)."""
    ops = verdicts.ops
    n_reg = int((ops[schema.VERDICT] == regress.REGRESSION).sum())
    keep = len(ops) if top <= 0 else max(top, n_reg)
    return pd.concat([verdicts.workload, ops.head(keep)], ignore_index=True), \
        max(0, len(ops) - keep)


def display(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows pre-formatted as strings under short headers (drops program when there is one)."""
    out = pd.DataFrame({header: [fmt(v) for v in rows[col]] for col, header, fmt in SHOWN})
    programs = set(rows[schema.PROGRAM]) - {regress.ALL_PROGRAMS}
    return out.drop(columns=["program"]) if len(programs) <= 1 else out


def _explanations(verdicts) -> list[str]:
    t = verdicts.table()
    return [e for e in t.loc[t[schema.VERDICT].isin([regress.REGRESSION, regress.IMPROVEMENT]),
                             schema.EXPLANATION] if e]


def render_text(verdicts, top: int) -> str:
    rows, hidden = shown_rows(verdicts, top)
    out = [f"harness compare: {verdicts.baseline} -> {verdicts.candidate}"]
    out += [f"warning: {w}" for w in verdicts.warnings]
    out.append(tables.to_text(display(rows)).rstrip("\n"))
    if hidden:
        out.append(f"... {hidden} more ops (--top 0 shows all)")
    out += [f"  {e}" for e in _explanations(verdicts)]
    could_see = verdicts.could_see()
    if could_see:
        out.append(could_see)
    out.append(verdicts.headline())
    return "\n".join(out) + "\n"


def render_markdown(verdicts, top: int) -> str:
    rows, hidden = shown_rows(verdicts, top)
    verdict, _, detail = verdicts.headline().partition(": ")
    out = [f"## harness compare: `{verdicts.baseline}` → `{verdicts.candidate}`", "",
           f"**{verdict}**: {detail}", ""]
    out += [f"> warning: {w}" for w in verdicts.warnings]
    if verdicts.warnings:
        out.append("")
    explanations = _explanations(verdicts)
    if explanations:
        out += [f"- {e}" for e in explanations] + [""]
    could_see = verdicts.could_see()
    if could_see:
        out += [could_see, ""]
    out.append(tables.to_markdown(display(rows)).rstrip("\n"))
    if hidden:
        out += ["", f"_{hidden} more ops not shown (`--top 0` shows all)._"]
    return "\n".join(out) + "\n"


def render_machine(fmt: str) -> Callable:
    def render(verdicts, top: int) -> str:
        rows, _ = shown_rows(verdicts, top)
        return tables.render(rows, fmt)
    return render


RENDERERS: dict[str, Callable] = {
    "text": render_text, "md": render_markdown,
    "csv": render_machine("csv"), "json": render_machine("json"),
}


def locate(ref: str, root: Path) -> Path:
    """A run path as given, or a run id (prefix) looked up under ``root``."""
    p = Path(ref)
    if p.is_dir() or p.is_absolute() or len(p.parts) > 1:
        return p  # a path: store.load says what is wrong with it
    return store.resolve(ref, root)


def main(args) -> int:
    baseline = [Run.load(locate(ref, args.root)) for ref in args.baseline]
    candidate = Run.load(locate(args.candidate, args.root))
    verdicts = regress.compare_runs(baseline, candidate, threshold=args.threshold,
                                    alpha=args.alpha, min_share=args.min_share)
    print(RENDERERS[args.format](verdicts, args.top), end="")
    if args.format in ("csv", "json"):  # keep stdout parseable
        for w in verdicts.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(verdicts.headline(), file=sys.stderr)
    return EXIT_REGRESSION if verdicts.regressed else EXIT_OK
