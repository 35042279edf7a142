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

Per point (``--points``): the run-to-run structure a whole sweep meets, each point's runs made
from the real runs' steps (their within-run spread) at the medians of its modes, as measured on
the development host: ``steady``, the real runs as they are; ``bimodal``, a CPU all-reduce
whose runs land at 2.2 ms or 4.6 ms (the wall step and the CPU time per step together);
``spin``, one whose runs land at 911 us or 865 us wall with 1.29x the CPU time per step in the
faster mode (threads spinning while they wait). Each is judged with the constant noise term
(``judge.Rule.noise``) and with the point's own spread from ``--history`` earlier runs of the
same code beside the baseline (``harness.regress.noise``), and then with each suspect pair
(a regression, or slower and inconclusive) confirmed by three reruns of the candidate
(``harness.regress.confirm``): A/A false alarms,
unstable points, and the power against a 1.3x slowdown (wall and CPU time).

Short histories (``--short N``): per point kind and per length of 5 to 10 nights, N histories
of one run a night as ``harness history`` reads them (``harness.regress.trend``): flat ones with
a new commit every night (each change of code tested: the false change points per history, and
the newest nights called a regression), and ones whose last 3 nights are a new commit 1.3x or
2x slower, wall and CPU time (found: a change point at its first night).

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
from harness.record import Run  # noqa: E402
from harness.regress import confirm, history, judge, noise, trend  # noqa: E402
from harness.regress.comparison import SUSPECT  # noqa: E402
from harness.regress.figures import CPU  # noqa: E402

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


# a point's modes: (wall step, CPU time per step) medians, each mode equally likely
MODES = {"steady": None, "bimodal": ((2.2e-3, 2.2e-3), (4.6e-3, 4.6e-3)),
         "spin": ((911e-6, 911e-6), (865e-6, 1.29 * 911e-6))}


def at_mode(run: Run, mode) -> Run:
    """``run`` with its steps rescaled to the medians of ``mode`` (wall, CPU time per step)."""
    if mode is None:
        return run
    wall, cpu = (np.asarray(run.meta[k], float) for k in (schema.STEP_TIMES_S,
                                                          schema.STEP_CPU_TIMES_S))
    return Run(meta=dict(run.meta, **{schema.STEP_TIMES_S: list(wall * mode[0] / np.median(wall)),
                                      schema.STEP_CPU_TIMES_S: list(cpu * mode[1]
                                                                    / np.median(cpu))}),
               ops=OPS)


def scaled(run: Run, f: float) -> Run:
    """``run`` doing ``f`` times the work per step: its wall and CPU times x ``f``."""
    return Run(meta=dict(run.meta, **{k: [t * f for t in run.meta[k]] for k in (
        schema.STEP_TIMES_S, schema.STEP_CPU_TIMES_S)}), ops=OPS)


def simulate_points(runs: list[dict], n: int, history: int, slowdown: float, rng,
                    rule: judge.Rule) -> dict:
    """Per (point kind, noise term), verdict counts of ``n`` A/A and A/B (``slowdown``)
    comparisons; the own spread from ``history`` runs beside the baseline."""
    seen: dict[tuple, Counter] = {}
    for kind, modes in MODES.items():
        for _ in range(n):
            def one():
                mode = None if modes is None else modes[rng.integers(len(modes))]
                return at_mode(draw(runs[rng.integers(len(runs))], rng), mode)

            base = [one() for _ in range(history + 1)]
            a, b = base[-1], one()
            slow = scaled(b, slowdown)
            own = noise.spreads([base, [b]]).get(judge.key(b))
            for term, spread in (("constant", None), (f"own ({history + 1} runs)", own)):
                for case, cand, f in (("A/A", b, 1.0), (f"A/B {slowdown:g}x", slow, slowdown)):
                    v = judge.compare(a, cand, rule, spread=spread)
                    seen.setdefault((kind, term, case), Counter())[v.verdict] += 1
                    if spread is None:
                        continue
                    if v.verdict in SUSPECT:  # confirmed by 3 reruns of the candidate
                        v = confirm.with_reruns(v, [scaled(one(), f) for _ in range(3)], rule,
                                                [base])
                    seen.setdefault((kind, "own + confirm 3", case), Counter())[v.verdict] += 1
    return seen


def short_history(runs: list[dict], kind: str, nights: int, rng, factor: float = 1.0,
                  after: int = 3) -> history.Series:
    """``nights`` nights of a point of ``kind`` (``MODES``), one run each, a new commit every
    night; the last ``after`` nights ``factor`` times slower (1: flat)."""
    modes, out = MODES[kind], []
    for i in range(1, nights + 1):
        mode = None if modes is None else modes[rng.integers(len(modes))]
        run = at_mode(draw(runs[rng.integers(len(runs))], rng), mode)
        if i > nights - after:
            run = scaled(run, factor)
        run.meta.update({schema.GIT_SHA: f"{i:040x}", schema.TIME: f"2026-11-{i:02d}T03:00"})
        out.append(history.night(f"night-{i:02d}", [run], CPU))
    return history.series_of(kind, out, CPU)


def simulate_short(runs: list[dict], n: int, rng, rule: judge.Rule) -> dict:
    """Per (kind, nights): of ``n`` flat histories, those with a change point and those whose
    newest night is a regression; of ``n`` with a 1.3x and a 2x step 3 nights before the end,
    those whose change point is found at its first night, and those whose newest night is
    called a regression (the step's third night, judged against the nights before it)."""
    seen: dict[tuple, Counter] = {}
    for kind in MODES:
        for nights in range(5, 11):
            c = seen.setdefault((kind, nights), Counter())
            for _ in range(n):
                t = trend.judge_trend(short_history(runs, kind, nights, rng), rule)
                c["false change"] += bool(t.changes)
                c["false regression"] += t.verdict == judge.REGRESSION
                for f in (1.3, 2.0):
                    t = trend.judge_trend(short_history(runs, kind, nights, rng, f), rule)
                    c[f"{f:g}x found"] += any(x.index == nights - 3 for x in t.changes)
                    c[f"{f:g}x newest"] += t.verdict == judge.REGRESSION
    return seen


def _short(runs: list[dict], args, rule: judge.Rule) -> None:
    """Print the short histories' rates (``simulate_short``)."""
    print(f"short histories, {args.short} per kind and length (a commit every night):")
    t0 = time.perf_counter()
    for (kind, nights), c in simulate_short(runs, args.short, np.random.default_rng(args.seed),
                                            rule).items():
        print(f"  {kind:8s} {nights:2d} nights: flat: change point "
              f"{c['false change'] / args.short:5.1%}, newest a regression "
              f"{c['false regression'] / args.short:5.1%}; " + "; ".join(
                  f"{f} step: found at its night {c[f + ' found'] / args.short:5.1%}, newest a "
                  f"regression {c[f + ' newest'] / args.short:5.1%}" for f in ("1.3x", "2x")))
    print(f"  ({time.perf_counter() - t0:.0f} s)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", type=Path, default=DATA,
                   help=f"an export of bench_regress_real.py (default {DATA.relative_to(ROOT)})")
    p.add_argument("--comparisons", type=int, default=1000)
    p.add_argument("--slowdown", type=float, nargs="+", default=[1.5, 2.0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--points", type=int, default=0, metavar="N",
                   help="also N comparisons per point kind (steady, bimodal, spin) and noise term")
    p.add_argument("--history", type=int, default=4,
                   help="earlier runs of the same code beside the baseline (default 4)")
    p.add_argument("--short", type=int, default=0, metavar="N",
                   help="also N short histories (5-10 nights) per point kind and length")
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
    for name, counts in simulate(runs, args.comparisons, args.slowdown,  # 0: per point alone
                                 np.random.default_rng(args.seed), rule).items():
        if not counts:
            continue
        n = sum(counts.values())
        k = counts[judge.REGRESSION]
        goal = (f"goal <= {GOAL_FALSE:.0%}" if name == "A/A" else f"goal >= {GOAL_POWER:.0%}"
                if name.endswith("work") and float(name.split()[1][:-1]) >= 1.5 else "no goal")
        rest = ", ".join(f"{v} {counts[v]}" for v in judge.VERDICTS[1:] if counts[v])
        print(f"  {name:16s} regression {ci(k, n)} [{goal}]; {rest}")
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    if args.points:
        _points(runs, args, rule)
    if args.short:
        _short(runs, args, rule)
    return 0


def _points(runs: list[dict], args, rule: judge.Rule) -> None:
    """Print the per-point figures: regressions (false alarms in A/A, power in A/B), unstable."""
    print(f"per point, {args.points} comparisons each (A/A; A/B 1.3x):")
    t0 = time.perf_counter()
    for (kind, term, case), c in simulate_points(runs, args.points, args.history, 1.3,
                                                 np.random.default_rng(args.seed), rule).items():
        k = sum(c.values())
        print(f"  {kind:8s} {term:16s} {case:9s} regression {ci(c[judge.REGRESSION], k)}; "
              f"unstable {c[judge.UNSTABLE] / k:.0%}, inconclusive "
              f"{c[judge.INCONCLUSIVE] / k:.0%}")
    print(f"  ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
