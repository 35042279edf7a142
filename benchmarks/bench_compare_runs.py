"""Back-to-back runs of the same code, compared pairwise: how many say "regression"? And does an
injected 2x slowdown of the largest op get flagged?

    python benchmarks/bench_compare_runs.py [--runs 10] [--steps 10] [--history] [RUN_DIR ...]

Without run directories, runs ``python -m harness run llama_train --steps N`` ``--runs`` times
into a temporary directory (each in a fresh process, as a nightly job would), then compares
every ordered pair with ``harness.runs.regress.compare_runs`` (the rule of ``harness compare``),
and every run against each other run with its largest op's per-step samples doubled. Prints the
verdict counts; the goal is no regression among the identical pairs and every injected one
flagged.
"""
from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import schema
from harness.runs import regress, store
from harness.runs.run import Run


def make_runs(n: int, steps: int) -> list[Path]:
    out = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    for i in range(n):
        subprocess.run([sys.executable, "-m", "harness", "run", "llama_train", "--steps",
                        str(steps), "--out", str(out), "--top", "1"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"run {i + 1}/{n} done", file=sys.stderr)
    return sorted(p for p in out.iterdir() if (p / store.META).exists())


def slowed(run: Run, factor: float = 2.0,
           op: str | None = None) -> tuple[Run, str]:
    """``run`` with ``op`` (default: its largest) ``factor`` times slower in every step and in
    its table."""
    op = op or run.ops.sort_values(schema.MEASURED_S).iloc[-1][schema.OP]
    ops = run.ops.copy()
    ops.loc[ops[schema.OP] == op, schema.MEASURED_S] *= factor
    steps = run.steps.copy()
    steps.loc[steps[schema.OP] == op, schema.MEASURED_S] *= factor
    return Run(path=run.path.with_name(run.path.name + "-slowed"), meta=run.meta,
                           ops=ops, steps=steps), op


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, help="stored runs (default: make them)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--history", action="store_true", help="also compare each run against all "
                   "the others as a history of baselines (leave one out), with every op holding "
                   ">= 5%% of the step slowed by 20%% in turn")
    args = p.parse_args(argv)
    runs = [Run.load(d) for d in (args.dirs or make_runs(args.runs, args.steps))]
    pairwise(runs)
    if args.history:
        leave_one_out(runs)
    return 0


def leave_one_out(runs: list[Run], factor: float = 1.2,
                  min_share: float = 0.05) -> None:
    """Each run against the other runs as its baselines: as is (any regression is false), and
    with each op holding >= ``min_share`` of its step ``factor`` times slower (power)."""
    false, tries, caught = 0, 0, 0
    for i, cand in enumerate(runs):
        history = runs[:i] + runs[i + 1:]
        v = regress.compare_runs(history, cand)
        false += v.regressed
        if v.regressed:
            print(f"  false alarm against {v.baseline} -> {cand.run_id}: {v.headline()}")
        share = cand.ops[schema.MEASURED_S] / cand.ops[schema.MEASURED_S].sum()
        for op in cand.ops.loc[share >= min_share, schema.OP]:
            slow, _ = slowed(cand, factor, op)
            v = regress.compare_runs(history, slow)
            tries += 1
            caught += v.regressed and op in set(v.regressions[schema.OP])
    print(f"{len(runs)} runs, each against the other {len(runs) - 1} as its baselines: "
          f"{false} of {len(runs)} say REGRESSION (goal: 0); an op >= {min_share:.0%} of the step "
          f"slowed {factor - 1:.0%}: flagged in {caught}/{tries} (goal: >= 95%)")


def pairwise(runs: list[Run]) -> None:
    """Every ordered pair of runs: verdicts of identical code, and an injected 2x slowdown."""
    same, injected, caught = Counter(), 0, 0
    for a, b in itertools.permutations(runs, 2):
        v = regress.compare_runs(a, b)
        same[v.headline().split(":")[0]] += 1
        if v.regressed:
            print(f"  false alarm {a.run_id} -> {b.run_id}: {v.headline()}")
        c, op = slowed(b)
        v = regress.compare_runs(a, c)
        injected += 1
        caught += v.regressed and op in set(v.regressions[schema.OP])
    pairs = sum(same.values())
    print(f"{len(runs)} runs, {pairs} ordered pairs of identical code: "
          + ", ".join(f"{k} {n}" for k, n in sorted(same.items()))
          + f" (goal: REGRESSION 0); injected 2x slowdown of the largest op flagged in "
            f"{caught}/{injected} (goal: all)")


if __name__ == "__main__":
    sys.exit(main())
