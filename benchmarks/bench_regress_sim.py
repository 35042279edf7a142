"""How often ``harness compare`` cries wolf, and how often it catches a real slowdown.

    python benchmarks/bench_regress_sim.py [RUN_OR_STEPS_PARQUET ...] [--comparisons N]
                                           [--steps N [N ...]] [--history K [K ...]]
                                           [--slowdown F [F ...]]

Draws pairs of synthetic runs with the noise of real stored runs of one workload (default:
``benchmarks/data/llama_train_cpu/``, ten back-to-back ``harness run llama_train`` runs of 10
steps on the 2-core development host, CPU ops timed as host shares, 430 ops each; the ops of
their ops tables) and compares
them with ``harness.runs.regress.compare_runs``:

- A/A: nothing changed; a comparison that fails (``regressed``) is a false regression;
- A/B: one op holding >= 5% of the step is 20% slower in the candidate; the comparison should
  fail with that op flagged (power).

Noise model, in logs, from the K real runs of each op (``t[op, run, step]``): ``log t = mu[op] +
drift[run] + offset[op, run] + residual[op, run, step]``: ``mu`` the op's mean log median over runs,
``drift`` a run's median offset over ops (the host was busier), ``offset`` the op's own run-to-run
deviation, ``residual`` the per-step deviation from its run's median. A synthetic run takes
``drift`` from one real run, each op's ``offset`` from a real run drawn per op, and whole steps
(every op's residuals at once, so a slow step slows all ops) from one real run, drawn with
replacement. Deviations from a mean over K runs are scaled by sqrt(K / (K - 1)) so they keep the
real spread; ``--noise-scale`` shrinks or grows them all. Also printed: the old rule (each op's own
U test at 0.05, no correction) on the same comparisons.

Pass other runs (run directories or steps.parquet files; at least 3) to measure another host:
the figures are only as quiet as the runs they are drawn from. ``--steps 10 40 160`` draws runs of
each length (steps resampled from the real ones, as if independent): how many steps a nightly job
on this host needs for the power it wants. ``--history 1 9`` compares each candidate against one
baseline and against nine drawn the same way (``harness compare`` with several baselines).
``--slowdown 1.2 1.5 2`` measures the power at each slowdown on the same draws: the smallest a
nightly job on this host catches with the power it wants. Also printed: what each A/A comparison
said it could flag of the op the A/B then slows (``detectable``, ``harness.runs.detect``), and how
often the A/B outcome was the one that figure foretold (flagged exactly when the slowdown reaches
it).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import schema
from harness.runs import regress
from harness.runs.run import STEPS_PARQUET, Run

DATA = ROOT / "benchmarks" / "data" / "llama_train_cpu"
PROGRAM = "jit_train_step"
SLOWDOWN, MIN_SHARE = 1.20, 0.05  # the A/B change: 20% on an op holding >= 5% of the step


def load(paths: list[Path]) -> np.ndarray:
    """log times as an array [run, op, step] over the ops and steps every run has."""
    files = [p / STEPS_PARQUET if p.is_dir() else p for p in paths]
    tables = [pd.read_parquet(f) for f in files]
    if len(tables) < 3:
        raise SystemExit(f"need at least 3 runs of one workload, got {len(tables)}")
    ops = sorted(set.intersection(*(set(t[schema.OP]) for t in tables)))
    steps = min(t[schema.STEP].nunique() for t in tables)
    arrays = []
    for t in tables:
        w = t.pivot_table(index=schema.OP, columns=schema.STEP, values=schema.MEASURED_S,
                          aggfunc="sum").loc[ops].iloc[:, :steps]
        arrays.append(np.log(np.clip(w.to_numpy(float), 1e-9, None)))
    return np.stack(arrays), ops


class NoiseModel:
    """The decomposition of the module docstring, and draws from it."""

    def __init__(self, log_t: np.ndarray, scale: float = 1.0):
        k = log_t.shape[0]
        med = np.median(log_t, axis=2)                     # [run, op]
        self.mu = med.mean(axis=0)                         # [op]
        dev = med - self.mu
        c = scale * math.sqrt(k / (k - 1))
        self.drift = np.median(dev, axis=1) * c            # [run]
        self.offset = (dev - np.median(dev, axis=1, keepdims=True)) * c
        self.residual = scale * (log_t - med[:, :, None])  # [run, op, step]
        t = np.exp(self.mu)
        self.share = t / t.sum()

    def draw(self, rng: np.random.Generator, steps: int) -> np.ndarray:
        """One synthetic run's times [op, step] in seconds."""
        k, n_ops, n_steps = self.residual.shape
        runs = rng.integers(k, size=n_ops)
        offset = self.offset[runs, np.arange(n_ops)]
        source = rng.integers(k)
        cols = rng.integers(n_steps, size=steps)
        resid = self.residual[source][:, cols]
        return np.exp(self.mu[:, None] + self.drift[rng.integers(k)] + offset[:, None] + resid)


def stored(name: str, ops: list[str], t: np.ndarray) -> Run:
    """An in-memory run (ops table of medians and the per-step table) for ``compare_runs``."""
    n_ops, steps = t.shape
    ops_df = pd.DataFrame({schema.PROGRAM: PROGRAM, schema.OP: ops,
                           schema.MEASURED_S: np.median(t, axis=1)})
    steps_df = pd.DataFrame({schema.PROGRAM: PROGRAM, schema.OP: np.repeat(ops, steps),
                             schema.STEP: np.tile(np.arange(steps), n_ops),
                             schema.MEASURED_S: t.ravel()})
    return Run(path=Path(name), meta={}, ops=ops_df, steps=steps_df)


def old_rule(v: regress.Verdicts, rule: regress.Rule) -> bool:
    """The rule before Benjamini-Hochberg: any material op beyond the threshold at p <= 0.05."""
    o = v.ops
    return bool(((o[schema.CHANGE] > rule.threshold) & (o[schema.P_VALUE] <= rule.alpha)).any())


def ci(k: int, n: int) -> str:
    """k/n with a 95% Wilson interval."""
    p, z = k / n, 1.96
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p:6.1%} ({k}/{n}; 95% CI {max(0, c - h):.1%}-{min(1, c + h):.1%})"


def simulate(model: NoiseModel, ops: list[str], big: np.ndarray, steps: int, n: int,
             rng: np.random.Generator, history: int = 1,
             slowdowns: tuple[float, ...] = (SLOWDOWN,)) -> None:
    """``n`` A/A and ``n`` A/B comparisons per slowdown (the same op of the same draw slowed by
    each) of runs of ``steps`` steps against ``history`` baseline runs each; prints the rates."""
    rule = regress.Rule()
    false_new = false_old = inconclusive = 0
    caught = dict.fromkeys(slowdowns, 0)
    predicted = dict.fromkeys(slowdowns, 0)  # A/B outcomes the A/A detectable figure foretold
    figures = []
    t0 = time.perf_counter()
    for _ in range(n):
        a = [stored(f"A{i}", ops, model.draw(rng, steps)) for i in range(history)]
        b = model.draw(rng, steps)
        v = regress.compare_runs(a, stored("B", ops, b))
        false_new += v.regressed
        false_old += history == 1 and old_rule(v, rule)
        inconclusive += v.counts()[regress.INCONCLUSIVE] > 0
        j = rng.choice(big)
        d = float(v.ops.set_index(schema.OP).loc[ops[j], schema.DETECTABLE])
        figures.append(d)
        for f in slowdowns:
            slower = b.copy()
            slower[j] *= f
            v = regress.compare_runs(a, stored("B", ops, slower))
            hit = v.regressed and ops[j] in set(v.regressions[schema.OP])
            caught[f] += hit
            predicted[f] += hit == (f - 1 >= d)
    print(f"{steps} steps per run, {history} baseline run(s) per comparison:")
    print(f"  A/A false regressions (goal <= 1%):     {ci(false_new, n)}")
    if history == 1:
        print(f"    old rule (per-op U at 0.05, no FDR):  {ci(false_old, n)}")
    print(f"    A/A with some op inconclusive:        {ci(inconclusive, n)}")
    for f, k in caught.items():
        goal = " (goal >= 95%)" if f == SLOWDOWN else ""
        print(f"  A/B power, {f:g}x on an op >= {MIN_SHARE:.0%}{goal}: {ci(k, n)}")
    q = np.nanpercentile(figures, [25, 50, 75])  # NaN: the op was flagged in the A/A itself
    print(f"  what the A/A comparison said it could flag of that op (detectable): quartiles "
          f"+{q[0]:.0%}, +{q[1]:.0%}, +{q[2]:.0%}; A/B outcome as it foretold: "
          + ", ".join(f"{predicted[f] / n:.1%} at {f:g}x" for f in slowdowns))
    print(f"  ({(1 + len(slowdowns)) * n} comparisons in {time.perf_counter() - t0:.0f} s)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path, help="runs or steps.parquet files (default: "
                   f"{DATA.relative_to(ROOT)})")
    p.add_argument("--comparisons", type=int, default=1000, help="A/A and A/B pairs each")
    p.add_argument("--steps", type=int, nargs="+", default=None, help="steps per synthetic "
                   "run, one or more lengths (default: as many as the real runs have)")
    p.add_argument("--history", type=int, nargs="+", default=[1], help="baseline runs per "
                   "comparison, one or more counts (more than 1: harness compare with a history "
                   "of baselines, each op judged by its own run-to-run spread)")
    p.add_argument("--slowdown", type=float, nargs="+", default=[SLOWDOWN], help="the A/B "
                   "slowdown of one op, one or more factors (default 1.2), each on the same draws")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise-scale", type=float, default=1.0, help="multiply every log deviation "
                   "(0.25: a host four times quieter than the one the runs came from)")
    args = p.parse_args(argv)
    paths = args.runs or sorted(DATA.glob("*.parquet"))
    log_t, ops = load(paths)
    model = NoiseModel(log_t, args.noise_scale)
    big = np.flatnonzero(model.share >= MIN_SHARE)
    rng = np.random.default_rng(args.seed)
    print(f"{len(paths)} real runs, {len(ops)} ops, {log_t.shape[2]} steps each; noise x "
          f"{args.noise_scale:g}; {len(big)} ops hold >= {MIN_SHARE:.0%} of the step; run-to-run "
          f"drift sigma {np.std(model.drift):.1%}, median op offset sigma "
          f"{np.median(np.std(model.offset, axis=0)):.1%}")
    for steps in args.steps or [log_t.shape[2]]:
        for k in args.history:
            simulate(model, ops, big, steps, args.comparisons, rng, k, tuple(args.slowdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
