"""The statistics behind ``harness compare`` (``harness.runs.regress`` states the rule).

- ``u_test``: two-sided Mann-Whitney U on one op's per-step samples (within-run noise);
- ``min_p_value``: the smallest p that test can return for n vs m samples (exact);
- ``run_to_run``: how far ops of the same program move between two runs (run-to-run noise),
  estimated robustly from the spread of all tested ops' log changes, and the p-value of one
  op's change against it;
- ``bh_adjust``: Benjamini-Hochberg adjusted p-values (q-values), which control the false
  discovery rate over many ops tested at once;
- ``median_se``: the standard error of a difference of two medians (the step total's noise);
- ``moderated_variance``: per-op variances from a few runs each, moderated towards their common
  value (``harness.runs.history``: a baseline of several runs).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq
from scipy.special import digamma, polygamma
from scipy.stats import mannwhitneyu, t

MAD_TO_SIGMA = 1.4826    # sigma of a normal distribution = 1.4826 x its median absolute deviation
MEDIAN_SE = 1.2533       # s.e. of a median of n normal samples = 1.2533 sigma / sqrt(n)
MIN_OPS_FOR_SPREAD = 8   # fewer tested ops than this: no run-to-run estimate (term left out)
# The run-to-run null: Student's t with NULL_DF degrees of freedom, scaled to the median absolute
# deviation of N(0, sigma^2). Heavier tails (fewer df) cry wolf less on a busy host and flag less.
# Ten back-to-back llama_train runs on the 2-core development host (benchmarks/data/) move some
# CPU collectives 2-3x between runs while the median op moves 10%: far beyond a normal tail. With
# 30 df, 5% of simulated identical-code comparisons failed; with 5 df, 0.3%, and every injected
# 2x slowdown of the largest op in the 90 real pairs was still flagged (3 df: 73 of 90).
# benchmarks/bench_regress_sim.py and bench_compare_runs.py measure both sides.
NULL_DF = 5


def min_p_value(n: int, m: int) -> float:
    """Smallest two-sided p the exact Mann-Whitney U test can return for n vs m samples."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def u_test(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value of ``a`` vs ``b``; NaN when a side has no samples."""
    if len(a) == 0 or len(b) == 0:
        return float("nan")
    if np.ptp(np.concatenate([a, b])) == 0.0:  # all equal: nothing to rank
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def u_tests(a: np.ndarray, zs: np.ndarray) -> np.ndarray:
    """``u_test(a, z)`` for each row ``z`` of ``zs`` (none of them tied with ``a``), in one
    call: scipy picks its method from the sizes and the ties, the same for every row."""
    return np.asarray(mannwhitneyu(a[None, :], zs, alternative="two-sided", axis=-1).pvalue,
                      float)


def robust_sigma(x: np.ndarray) -> float:
    """sigma estimated as 1.4826 x the median absolute deviation (NaN for no data)."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return float("nan")
    return float(MAD_TO_SIGMA * np.median(np.abs(x - np.median(x))))


class RunToRun(NamedTuple):
    """The run-to-run term of the tested ops (``run_to_run``, ``History.run_to_run``).

    ``sigma``: its size (tau, or the median op's own spread); ``p``: each op's two-sided p;
    ``noise``: each op's total noise, which ``regress.decide`` holds against the threshold; and
    the null each p came from: an op's drift-adjusted log change over ``t_scale`` is Student's
    t on ``t_df`` degrees of freedom (``t_scale`` 0: the term is absent and every p is 0)."""

    sigma: float
    p: np.ndarray
    noise: np.ndarray
    t_scale: np.ndarray
    t_df: np.ndarray

    def critical(self, level) -> np.ndarray:
        """Per op, the drift-adjusted log change whose p is ``level`` (0 where absent)."""
        return np.asarray(self.t_scale, float) * t.isf(np.asarray(level, float) / 2, self.t_df)


def run_to_run(log_changes: np.ndarray, se: np.ndarray | None = None) -> RunToRun:
    """How far the tested ops move between runs beyond their own within-run noise (tau), each
    op's two-sided p, and each op's total noise sqrt(se^2 + tau^2).

    ``log_changes``: each op's log(candidate / baseline); ``se``: the standard error of each
    (``median_se`` of its log samples; None: 0). Most ops of a program do not change between two
    runs, so the spread of their changes around the median is the noise one op's change must
    beat (an empirical null, Efron 2004); the median is the whole run's drift, which the step
    total judges. ``tau`` is the smallest between-run term that brings the robust spread (MAD)
    of the standardized changes ``d / sqrt(se^2 + tau^2)`` down to 1 (as a random-effects model
    does), so a quiet op is judged by its own small noise and a noisy one by its large one.
    With fewer than ``MIN_OPS_FOR_SPREAD`` finite values tau is NaN and every p is 0 (the term
    drops out; the per-op U test decides alone)."""
    r = np.asarray(log_changes, float)
    se = np.zeros(len(r)) if se is None else np.nan_to_num(np.asarray(se, float))
    finite = np.isfinite(r)
    df = np.full(len(r), float(NULL_DF))
    if finite.sum() < MIN_OPS_FOR_SPREAD:
        return RunToRun(float("nan"), np.zeros(len(r)), np.full(len(r), np.nan),
                        np.zeros(len(r)), df)
    d = np.where(finite, r - np.median(r[finite]), 0.0)
    tau = float(_taus(d[finite][None, :], se[finite])[0])
    total = np.sqrt(se ** 2 + tau ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, null_p(d / total, 1.0), np.where(d == 0, 1.0, 0.0))
    return RunToRun(tau, np.where(finite, p, 1.0), total, total * _null_scale(1.0), df)


def _taus(d: np.ndarray, se: np.ndarray) -> np.ndarray:
    """``run_to_run``'s tau for each row of ``d`` (finite drift-adjusted log changes; ``se`` per
    column): the smallest tau that brings the MAD spread of ``d / sqrt(se^2 + tau^2)`` down to
    1, by bisection, all rows at once."""
    def mad(x: np.ndarray) -> np.ndarray:
        return MAD_TO_SIGMA * np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1)

    def spread(tau: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            z = d / np.sqrt(se[None, :] ** 2 + tau[:, None] ** 2)
        return mad(np.where(d == 0, 0.0, z))

    lo, hi = np.zeros(len(d)), mad(d) + float(np.max(se, initial=0.0)) + 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):  # at tau 0 an op without se drops out
        at_zero = np.where(d == 0, 0.0, d / se[None, :])
    bisect = np.array([not robust_sigma(row) <= 1 for row in at_zero])  # spread falls with tau
    for _ in range(50):
        mid = (lo + hi) / 2
        wide = spread(mid) > 1
        lo, hi = np.where(wide, mid, lo), np.where(wide, hi, mid)
    return np.where(bisect, hi, 0.0)


def each_on_top(r: np.ndarray, rows) -> np.ndarray:
    """Row k: the finite log changes of ``r`` with that of op ``rows[k]`` (an index into ``r``;
    its change must be finite) put far above every other."""
    r = np.asarray(r, float)
    finite = np.isfinite(r)
    at = (np.cumsum(finite) - 1)[np.asarray(rows, int)]  # positions among the finite ones
    slowed = np.tile(r[finite], (len(at), 1))
    slowed[np.arange(len(at)), at] = float(np.max(r[finite])) + 10.0
    return slowed


def critical_on_top(log_changes: np.ndarray, se: np.ndarray, level: np.ndarray,
                    rows: list[int] | None = None) -> np.ndarray:
    """Per op of ``rows`` (default: all), ``run_to_run(...).critical(level)`` of the run with
    that op's log change put above every other's (``harness.runs.detect``: where a slowdown
    that is flagged puts it; the drift, a median, and tau, from a MAD, are then those of the
    other ops' positions)."""
    r = np.asarray(log_changes, float)
    se = np.nan_to_num(np.asarray(se, float))
    rows = list(range(len(r))) if rows is None else list(rows)
    finite = np.isfinite(r)
    if finite.sum() < MIN_OPS_FOR_SPREAD:
        return np.zeros(len(rows))
    live = [i for i in rows if finite[i]]
    slowed = each_on_top(r, live)
    tau = dict(zip(live, _taus(slowed - np.median(slowed, axis=1, keepdims=True), se[finite])))
    total = np.array([math.sqrt(se[i] ** 2 + tau[i] ** 2) if finite[i] else 0.0 for i in rows])
    return total * _null_scale(1.0) * t.isf(np.asarray(level, float)[rows] / 2, NULL_DF)


def _null_scale(sigma: float) -> float:
    """The scale of the Student t (``NULL_DF``) whose median absolute deviation is that of
    N(0, sigma^2)."""
    return sigma / MAD_TO_SIGMA / t.ppf(0.75, NULL_DF)


def null_p(d, sigma: float):
    """Two-sided p of log change(s) ``d`` under the run-to-run null: Student's t (``NULL_DF``)
    whose median absolute deviation is that of N(0, sigma^2)."""
    return 2 * t.sf(np.abs(d) / _null_scale(sigma), NULL_DF)


def bh_adjust(p: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: rejecting every q <= alpha keeps the expected
    share of false rejections among all rejections at most alpha (independent or positively
    dependent tests; Benjamini & Hochberg 1995, Benjamini & Yekutieli 2001). NaN stays NaN and
    does not count.

    ``weights`` (positive, fixed before the data are seen; rescaled to mean 1 over the tested):
    the weighted procedure of Genovese, Roeder & Wasserman (2006), BH on ``p / w``, which keeps
    the same bound and spends more of it where the weights are large."""
    p = np.asarray(p, float)
    q = np.full(len(p), np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m == 0:
        return q
    if weights is not None:
        w = np.asarray(weights, float)[ok]
        if not (np.all(np.isfinite(w)) and np.all(w > 0)):
            raise ValueError("Benjamini-Hochberg weights must be positive and finite")
        p = p.copy()
        p[ok] = p[ok] / (w / w.mean())
    order = np.argsort(p[ok])
    scaled = p[ok][order] * m / np.arange(1, m + 1)
    scaled = np.minimum.accumulate(scaled[::-1])[::-1]  # q_(k) = min over j >= k
    out = np.empty(m)
    out[order] = np.minimum(scaled, 1.0)
    q[ok] = out
    return q


def median_se(a: np.ndarray, b: np.ndarray) -> float:
    """Standard error of median(b) - median(a), from each side's robust sigma (NaN when a side
    has fewer than 2 samples)."""
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    return MEDIAN_SE * math.sqrt(robust_sigma(a) ** 2 / len(a) + robust_sigma(b) ** 2 / len(b))


MAX_PRIOR_DF = 1e6  # "infinitely many": the variances agree with one common value


def moderated_variance(s2: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s~^2, degrees of freedom) per op: each sample variance ``s2`` (on ``d`` degrees of
    freedom; NaN or d = 0: none) moderated towards the common value, as limma does (Smyth 2004,
    "Linear models and empirical Bayes methods for assessing differential expression").

    The ops' variances are taken as draws of s0^2 x chi2(d0) / d0, scaled by each op's own. From
    the moments of log s^2 (E = log s0^2 + digamma(d/2) - log(d/2) - digamma(d0/2) + log(d0/2),
    Var = trigamma(d/2) + trigamma(d0/2)): d0 and s0^2, then
    s~^2 = (d0 s0^2 + d s^2) / (d0 + d) on d0 + d degrees of freedom. An op with no variance of
    its own gets s0^2 on d0; when the variances spread no more than chance gives, d0 is
    ``MAX_PRIOR_DF`` and every op gets s0^2. Fewer than 3 ops with a variance: no moderation.
    """
    s2 = np.asarray(s2, float)
    d = np.asarray(d, float)
    has = np.isfinite(s2) & (d > 0)
    if has.sum() < 3:
        return np.where(has, s2, np.nan), d
    tiny = 1e-12 * max(float(np.median(s2[has])), 1e-300)
    e = np.log(np.maximum(s2[has], tiny)) - digamma(d[has] / 2) + np.log(d[has] / 2)
    excess = float(np.var(e, ddof=1) - np.mean(polygamma(1, d[has] / 2)))
    if excess > polygamma(1, MAX_PRIOR_DF / 2):  # solve trigamma(d0 / 2) = excess for d0
        d0 = 2 * brentq(lambda x: polygamma(1, x) - excess, 1e-8, MAX_PRIOR_DF / 2)
    else:
        d0 = MAX_PRIOR_DF
    s0_2 = math.exp(float(np.mean(e)) + digamma(d0 / 2) - math.log(d0 / 2))
    own = np.where(has, s2, 0.0)
    dd = np.where(has, d, 0.0)
    return (d0 * s0_2 + dd * own) / (d0 + dd), d0 + dd
