"""Does ``harness history`` find a change where it is, and only there?

    python benchmarks/bench_history_sim.py [RUNS_JSON] [--seeds 20] [--nights 60] [--at 40]
        [--slowdown 1.3] [--changed steady|bimodal|spin]

Simulated histories of a sweep of 22 points (``KINDS``: the quick sweep's 16 collectives and 6
matmuls, each point one kind of run-to-run structure measured on the development host,
``bench_regress_sim.MODES``: ``steady``, the real MLP runs as they are; ``bimodal``, an
all-reduce whose runs land at 2.2 ms or 4.6 ms; ``spin``, 911 us, or 865 us with 1.29x the CPU
time per step), ``--nights`` nights of one run each, every run drawn from the real runs of
``RUNS_JSON`` (``bench_regress_sim.draw``: their steps drawn again with replacement, at the
medians of a mode picked at random). One point of kind ``--changed`` (picked at random per
seed) runs ``--slowdown`` times slower, wall and CPU time, from night ``--at`` on. The change
points are placed as ``harness history`` places them (``harness.regress.trend``), per seed:
found when one lies within one night of ``--at``; every other change point is a false one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_regress_sim as sim  # noqa: E402

from harness import schema  # noqa: E402
from harness.regress import changepoints, history, trend  # noqa: E402
from harness.regress.figures import CPU  # noqa: E402

# the quick sweep's 22 points: which structure each has (collectives alternate bimodal, spin
# and steady; the matmuls are steady)
KINDS = ["bimodal", "spin", "steady", "steady"] * 4 + ["steady"] * 6


def point_series(runs: list[dict], kind: str, nights: int, rng, factor_from: int = -1,
                 factor: float = 1.0, name: str = "point") -> history.Series:
    """One point's simulated series: one run a night (the module docstring); from night
    ``factor_from`` (1-based) on, ``factor`` times slower."""
    modes = sim.MODES[kind]
    out = []
    for i in range(1, nights + 1):
        mode = None if modes is None else modes[rng.integers(len(modes))]
        run = sim.at_mode(sim.draw(runs[rng.integers(len(runs))], rng), mode)
        if 0 < factor_from <= i:
            run = sim.scaled(run, factor)
        run.meta[schema.TEST] = name
        out.append(history.night(f"night-{i:02d}", [run], CPU))
    return history.series_of(name, out, CPU)


def history_of(runs: list[dict], nights: int, at: int, slowdown: float, changed: int, rng
               ) -> list[history.Series]:
    return [point_series(runs, kind, nights, rng, at if i == changed else -1, slowdown,
                         f"point {i} ({kind})") for i, kind in enumerate(KINDS)]


def one_seed(runs, args, seed: int) -> tuple[bool, int, int]:
    """(found within one night, false change points, change points on the changed point)."""
    rng = np.random.default_rng(seed)
    changed = int(rng.choice([i for i, k in enumerate(KINDS) if k == args.changed]))
    found, false = False, 0
    for i, s in enumerate(history_of(runs, args.nights, args.at, args.slowdown, changed, rng)):
        for c in trend.change_points(s, len(s.nights), args.significance):
            near = i == changed and abs(c.index + 1 - args.at) <= 1 and not found
            found, false = found or near, false + (not near)
    return found, false, changed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", type=Path, default=sim.DATA)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--nights", type=int, default=60)
    p.add_argument("--at", type=int, default=40)
    p.add_argument("--slowdown", type=float, default=1.3)
    p.add_argument("--changed", choices=list(sim.MODES), default="steady")
    p.add_argument("--significance", type=float, default=changepoints.ALPHA)
    args = p.parse_args(argv)
    import json

    runs = [r for r in json.loads(args.runs.read_text())
            if r.get(schema.STEP_CPU_TIMES_S) and r.get("cpu_rates")]
    t0 = time.perf_counter()
    found = falses = 0
    for seed in range(args.seeds):
        hit, false, changed = one_seed(runs, args, seed)
        found, falses = found + hit, falses + false
        print(f"  seed {seed:2d}: point {changed} ({args.changed}) {args.slowdown:g}x from night "
              f"{args.at}: {'found' if hit else 'MISSED'}; {false} false change points")
    print(f"{len(KINDS)} points x {args.nights} nights, {args.seeds} seeds, significance "
          f"{args.significance:g}: the change found within one night of night {args.at} in "
          f"{found}/{args.seeds}; false change points {falses / args.seeds:.2f} per history "
          f"({falses} in all); {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
