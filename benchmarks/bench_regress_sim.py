"""How often ``harness compare`` cries wolf, and how often it catches a real slowdown.

    python benchmarks/bench_regress_sim.py [RUNS_JSON] [--comparisons N] [--slowdown F [F ...]]

Draws pairs of synthetic runs from real ones and judges each with ``harness.regress.judge``
(the verdict of ``harness compare``). The real runs (default ``benchmarks/data/regress_cpu.json``,
written by ``bench_regress_real.py --export``): a user's MLP benchmark through the pytest
fixture on the 2-core development host, shared with other jobs, half of them with a CPU load
beside them; each keeps its wall and CPU time per step and its host speed probe.

A synthetic run is one real run with its steps drawn again with replacement (wall and CPU time
of a step together) and its probe's repeats likewise, before and after apart. Each comparison
takes two different real runs, at random:

- A/A: as they are; a ``regression`` is a false alarm (goal <= 1%);
- A/B, per slowdown F: the candidate's steps F times longer in wall and in CPU time (the same
  program doing F times the work per step, on the same host): a ``regression`` is a catch
  (goal >= 95% at 1.5x and 2x);
- A/B "waits": F times longer in wall time only (the program waits longer, its CPU work
  unchanged): caught only where the probe shows a steady host, else inconclusive.

Pass another export to measure another host: the figures are only as quiet as its runs.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import schema  # noqa: E402
from harness.chip import drift  # noqa: E402
from harness.regress import judge  # noqa: E402
from harness.runs.run import Run  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "regress_cpu.json"
# the program the runs ran, the same in every synthetic run (its verdict is the step's)
OPS = pd.DataFrame({schema.PROGRAM: ["jit_train_step"], schema.OP: ["fusion"],
                    schema.MEASURED_S: [1e-3], schema.PREDICTED_S: [1e-3],
                    schema.EFFICIENCY: [1.0]})
GOAL_FALSE, GOAL_POWER = 0.01, 0.95


def draw(real: dict, rng: np.random.Generator, factor: float = 1.0, cpu: float = 1.0) -> Run:
    """A synthetic run from one real run: steps and probe repeats drawn again with replacement;
    wall step times x ``factor``, CPU times x ``cpu``."""
    wall, cpus = (np.asarray(real[k], float) for k in (schema.STEP_TIMES_S,
                                                       schema.STEP_CPU_TIMES_S))
    i = rng.integers(len(wall), size=len(wall))

    def again(sides):
        return [list(rng.choice(np.asarray(s, float), size=len(s))) for s in sides]

    meta = {schema.TEST: "test_user_model.py::test_mlp",
            schema.STEP_TIMES_S: list(wall[i] * factor),
            schema.STEP_CPU_TIMES_S: list(cpus[i] * cpu),
            drift.HOST_DRIFT: {drift.RATES: again(real[drift.RATES]),
                               drift.CPU_RATES: again(real[drift.CPU_RATES])}}
    return Run(meta=meta, ops=OPS)


def ci(k: int, n: int) -> str:
    """k/n with a 95% Wilson interval."""
    p, z = k / n, 1.96
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p:6.1%} ({k}/{n}; 95% CI {max(0, c - h):.1%}-{min(1, c + h):.1%})"


def simulate(runs: list[dict], n: int, slowdowns: list[float], rng, rule: judge.Rule) -> dict:
    """Verdict counts of ``n`` A/A comparisons and, on the same draws, the A/B ones."""
    seen: dict[str, Counter] = {"A/A": Counter()}
    for _ in range(n):
        j, k = rng.choice(len(runs), size=2, replace=False)
        a, b = draw(runs[j], rng), draw(runs[k], rng)
        seen["A/A"][judge.compare(a, b, rule).verdict] += 1
        for f in slowdowns:
            for kind, cpu in (("work", f), ("waits", 1.0)):
                slow = Run(meta=dict(b.meta, **{
                    schema.STEP_TIMES_S: [t * f for t in b.meta[schema.STEP_TIMES_S]],
                    schema.STEP_CPU_TIMES_S: [t * cpu for t in b.meta[schema.STEP_CPU_TIMES_S]]}),
                           ops=OPS)
                seen.setdefault(f"A/B {f:g}x {kind}", Counter())[
                    judge.compare(a, slow, rule).verdict] += 1
    return seen


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", type=Path, default=DATA,
                   help=f"an export of bench_regress_real.py (default {DATA.relative_to(ROOT)})")
    p.add_argument("--comparisons", type=int, default=1000)
    p.add_argument("--slowdown", type=float, nargs="+", default=[1.5, 2.0])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    runs = [r for r in json.loads(args.runs.read_text())
            if r.get(schema.STEP_CPU_TIMES_S) and r.get(drift.CPU_RATES)]
    if len(runs) < 3:
        raise SystemExit(f"{args.runs}: need at least 3 runs with CPU times and a probe")
    wall = np.log([np.median(r[schema.STEP_TIMES_S]) for r in runs])
    cpu = np.log([np.median(r[schema.STEP_CPU_TIMES_S]) for r in runs])
    print(f"{len(runs)} real runs ({sum(r['loaded'] for r in runs)} with a CPU load beside "
          f"them); run-to-run sd of the median step in log: wall {wall.std(ddof=1):.3f}, "
          f"CPU time {cpu.std(ddof=1):.3f}")
    t0 = time.perf_counter()
    rule = judge.Rule()
    for name, counts in simulate(runs, args.comparisons, args.slowdown,
                                 np.random.default_rng(args.seed), rule).items():
        n = sum(counts.values())
        k = counts[judge.REGRESSION]
        goal = (f"goal <= {GOAL_FALSE:.0%}" if name == "A/A" else f"goal >= {GOAL_POWER:.0%}"
                if name.endswith("work") and float(name.split()[1][:-1]) >= 1.5 else "no goal")
        rest = ", ".join(f"{v} {counts[v]}" for v in judge.VERDICTS[1:] if counts[v])
        print(f"  {name:16s} regression {ci(k, n)} [{goal}]; {rest}")
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
