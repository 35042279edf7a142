"""Back-to-back runs of the same code, compared pairwise: how many say "regression"? And does an
injected 2x slowdown of the largest op get flagged?

    python benchmarks/bench_compare_runs.py [--runs 10] [--steps 10] [RUN_DIR ...]

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


def make_runs(n: int, steps: int) -> list[Path]:
    out = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    for i in range(n):
        subprocess.run([sys.executable, "-m", "harness", "run", "llama_train", "--steps",
                        str(steps), "--out", str(out), "--top", "1"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"run {i + 1}/{n} done", file=sys.stderr)
    return sorted(p for p in out.iterdir() if (p / store.META).exists())


def slowed(run: store.StoredRun, factor: float = 2.0) -> tuple[store.StoredRun, str]:
    """``run`` with its largest op ``factor`` times slower in every step and in its table."""
    op = run.ops.sort_values(schema.MEASURED_S).iloc[-1][schema.OP]
    ops = run.ops.copy()
    ops.loc[ops[schema.OP] == op, schema.MEASURED_S] *= factor
    steps = run.steps.copy()
    steps.loc[steps[schema.OP] == op, schema.MEASURED_S] *= factor
    return store.StoredRun(path=run.path.with_name(run.path.name + "-slowed"), meta=run.meta,
                           ops=ops, steps=steps), op


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, help="stored runs (default: make them)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args(argv)
    runs = [store.load(d) for d in (args.dirs or make_runs(args.runs, args.steps))]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
