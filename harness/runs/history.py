"""Several baseline runs of the same code: each op judged by its own run-to-run spread.

With one baseline, ``noise.run_to_run`` infers how far an op moves between runs from how far all
the tested ops moved: one between-run term for every op, under a heavy-tailed null. A nightly job
keeps its earlier runs, and K of them show each op's own spread: on the 2-core development host
one CPU collective moves 6% between identical runs and another 20%.

- ``History.pooled``: one baseline standing for the K runs, which ``harness.runs.regress``
  compares against. Each op's time is exp of the mean over the runs of its log time taken back by
  its run's drift; the per-step samples are every run's, each divided by its run's drift, so the
  U test sees K times the steps.
- ``History.run_to_run``: per tested op, the mean ``mu`` and variance ``s^2`` of its
  drift-adjusted log times over the ``n`` runs that have it (``d = n - 1`` degrees of freedom).
  With few runs one op's ``s^2`` is itself noisy, so it is moderated towards the tested ops'
  common variance (``noise.moderated_variance``, Smyth 2004). The candidate's log change
  against ``mu``, less the candidate's drift (the tested ops' median change), is then Student's t
  at scale ``s~ sqrt(1 + 1/n)`` (the candidate is one more draw of the op, and ``mu`` a mean of
  n) with ``d0 + d`` degrees of freedom, but no more than ``noise.NULL_DF``: a CPU collective
  that moves 5% between most runs jumps 2x in a few, and K runs that missed the jump cannot
  show it. Simulated from ten real CPU runs, nine baselines with ``d0 + d`` degrees of freedom
  cried wolf in 2.8% of identical-code comparisons (11 of 400), each time a collective 1.8-2.3x
  slower; capped at ``NULL_DF``, in none of 200.

A run's drift is the median over its ops of their log time less the ops' mean over runs: a host
that ran 10% slower throughout moves every op alike, and that is not any op's spread.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from harness import schema
from harness.errors import HarnessError
from harness.runs import noise, pair
from harness.runs.run import Run


@dataclass
class History:
    """K baseline runs, oldest first: each op's log times (rows (program, op), a column per run,
    NaN where a run lacks the op) and each run's drift."""

    runs: list[Run]
    log_t: pd.DataFrame
    drift: np.ndarray

    @classmethod
    def of(cls, runs: Sequence[Run], min_share: float = 0.01) -> History:
        """The history of ``runs`` (at least 2); drift is taken over the ops every run has that
        hold ``min_share`` of the step on average (all common ops when fewer than
        ``noise.MIN_OPS_FOR_SPREAD`` do)."""
        runs = list(runs)
        if len(runs) < 2:
            raise HarnessError(f"a baseline history needs at least 2 runs, got {len(runs)}")
        tables = [pair.prepare(r, f"baseline {i + 1}").set_index(pair.KEYS)
                  for i, r in enumerate(runs)]
        t = pd.concat([x["t"] for x in tables], axis=1, keys=range(len(runs)))
        log_t = np.log(t.where(t > 0))
        dev = log_t.sub(log_t.mean(axis=1), axis=0)
        common = log_t.notna().all(axis=1)
        share = pd.concat([x["share"] for x in tables], axis=1).mean(axis=1)
        big = common & (share >= min_share)
        rows = big if big.sum() >= noise.MIN_OPS_FOR_SPREAD else common
        drift = np.nan_to_num(dev[rows].median(axis=0).to_numpy(float))
        return cls(runs=runs, log_t=log_t, drift=drift)

    @property
    def label(self) -> str:
        """How the comparison names its baseline."""
        ids = [r.run_id for r in self.runs]
        return f"{len(ids)} runs ({ids[0]} .. {ids[-1]})"

    def adjusted(self) -> pd.DataFrame:
        """Each op's log times, each run's taken back by its drift."""
        return self.log_t - self.drift

    def mean_log(self) -> pd.Series:
        """Each op's mu: the mean over the runs that have it of its drift-adjusted log time."""
        return self.adjusted().mean(axis=1)

    def pooled(self) -> Run:
        """One baseline standing for the K runs (module docstring). Its ops table is the newest
        run's rows for each op (descriptive columns), with ``measured_s`` = exp(mu) and the
        efficiency recomputed from it."""
        newest_first = [r.ops.astype({schema.PROGRAM: str, schema.OP: str})
                        for r in reversed(self.runs)]
        ops = pd.concat(newest_first, ignore_index=True).drop_duplicates(pair.KEYS)
        mu = self.mean_log()
        t = np.exp(mu.reindex(pd.MultiIndex.from_frame(ops[pair.KEYS])).to_numpy(float))
        ops = ops.assign(**{schema.MEASURED_S: t})
        if schema.PREDICTED_S in ops.columns:
            ops[schema.EFFICIENCY] = ops[schema.PREDICTED_S] / ops[schema.MEASURED_S]
        steps = []
        offset = 0
        for run, d in zip(self.runs, self.drift):
            s = run.steps
            if s is None or s.empty:
                continue
            s = s.assign(**{schema.MEASURED_S: s[schema.MEASURED_S] / math.exp(d),
                            schema.STEP: s[schema.STEP] + offset})
            offset = int(s[schema.STEP].max()) + 1
            steps.append(s)
        newest = self.runs[-1]
        return Run(path=newest.path, meta=newest.meta, ops=ops.reset_index(drop=True),
                         steps=pd.concat(steps, ignore_index=True) if steps else pd.DataFrame())

    def run_to_run(self, keys: list, log_changes: np.ndarray) -> noise.RunToRun:
        """The tested ops' run-to-run term, as ``noise.run_to_run`` gives it, from each op's own
        spread over the runs: ``log_changes`` are the candidate's log times less mu (log of its
        time over the pooled baseline's); sigma is the median op's moderated spread, noise each
        op's scale ``s~ sqrt(1 + 1/n)``."""
        r = np.asarray(log_changes, float)
        if len(keys) == 0:
            return noise.RunToRun(math.nan, *np.zeros((4, 0)))
        a = self.adjusted().reindex(pd.MultiIndex.from_tuples(keys, names=pair.KEYS))
        n = a.notna().sum(axis=1).to_numpy()
        s2 = a.var(axis=1, ddof=1).to_numpy(float)  # NaN for an op in one run only
        s2_mod, df = noise.moderated_variance(s2, np.maximum(n - 1, 0))
        scale = np.sqrt(s2_mod * (1 + 1 / np.maximum(n, 1)))
        finite = np.isfinite(r)
        shift = float(np.median(r[finite])) if finite.any() else 0.0
        d = np.where(finite, r - shift, 0.0)
        df = np.minimum(df, noise.NULL_DF)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(scale > 0, 2 * student_t.sf(np.abs(d) / scale, df),
                         np.where(d == 0, 1.0, 0.0))
        sigma = float(np.median(np.sqrt(s2_mod))) if len(s2_mod) else math.nan
        return noise.RunToRun(sigma, np.where(finite, p, 1.0), scale, scale, df)
