"""What a comparison could have seen: per tested op, the smallest slowdown of that op alone that
``harness.runs.regress`` would flag (a minimum detectable effect).

A comparison that says "no regression" says nothing about changes it could not see. On a noisy
host a 20% slowdown of a collective is within its run-to-run noise, and a nightly job that
passes should say so. For each tested op that is not already a regression, ``detectable`` is
the smallest ``f - 1`` such that the candidate with that op's times (its median and its
per-step samples) multiplied by ``f`` meets every condition of a regression:

1. the change beyond the threshold: ``(1 + change) f > 1 + threshold``;
2. the run-to-run test at the op's level: ``r + ln f - shift >= critical(level)``, where
   ``r`` is the op's log change, ``shift`` the run's drift (the tested ops' median log change)
   and ``critical`` the log change whose p under the op's null is ``level``;
3. the per-step U test, the candidate's samples taken back by the drift as the verdict does,
   at ``p <= level`` with the candidate's median above the baseline's.

``level`` is ``alpha w / m``: ``m`` tested ops and ``w`` the op's Benjamini-Hochberg weight
(its baseline share, rescaled to mean 1). Ranked first, an op's q is at most ``m p / w``, so at
this level it is flagged whatever the other ops do; other near-significant ops can only flag it
sooner. The drift and the run-to-run noise are those of the run with the op's change at the top
(``per_op``), where a slowdown that is flagged puts it. ``inf``: no slowdown can be flagged (too
few steps for the U test to reach the level); NaN: not tested, or already a regression.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from harness.runs import noise


def levels(alpha: float, weights: np.ndarray) -> np.ndarray:
    """Per tested op, the p at which it is flagged ranked first: ``alpha w / m`` (weights
    rescaled to mean 1, as ``noise.bh_adjust`` does)."""
    w = np.asarray(weights, float)
    return alpha * (w / w.mean()) / len(w) if len(w) else w


def u_factor(a: np.ndarray, z: np.ndarray, level: float) -> float:
    """The smallest ``f`` for which ``noise.u_test(a, z * f)`` rejects at ``level`` with
    ``z * f`` the slower side; inf when no ``f`` can (too few samples), NaN without samples.

    The U statistic changes only where some ``z_k f`` passes some ``a_j``, so the answer is one
    of those crossings: the first after which every region between crossings rejects (each
    region tested once, at the geometric mean of its ends, away from ties; all in one call)."""
    a, z = np.asarray(a, float), np.asarray(z, float)
    a, z = a[a > 0], z[z > 0]
    if len(a) == 0 or len(z) == 0:
        return math.nan
    if noise.min_p_value(len(a), len(z)) > level:
        return math.inf
    floor = float(np.median(a) / np.median(z))  # below it z * f is not the slower side
    cuts = np.unique((a[:, None] / z[None, :]).ravel())
    starts = np.concatenate([[floor], cuts[cuts > floor]])
    ends = np.concatenate([starts[1:], [starts[-1] * 1.01]])
    p = noise.u_tests(a, z[None, :] * np.sqrt(starts * ends)[:, None])
    rejects = p <= level
    if not rejects[-1]:
        return math.inf
    first = len(rejects) - int(np.argmin(rejects[::-1])) if not rejects.all() else 0
    return float(starts[first])


def detectable(change: float, r: float, shift: float, critical: float, level: float,
               a: np.ndarray, z: np.ndarray, threshold: float) -> float:
    """The module's ``detectable`` for one op: ``change`` and ``r = ln(1 + change)`` its change,
    ``shift`` the run's drift with the op slowed (NaN when unknown: no drift, no run-to-run
    term), ``critical`` the log change its run-to-run null then rejects at ``level`` (0: no
    such term), ``a`` and ``z`` its baseline and candidate samples."""
    if not (math.isfinite(change) and change > -1):
        return math.nan
    known = math.isfinite(shift)
    f_threshold = (1 + threshold) / (1 + change)
    f_null = math.exp(critical + shift - r) if known and critical > 0 else 0.0
    f_u = u_factor(a, np.asarray(z, float) * (math.exp(-shift) if known else 1.0), level)
    return max(f_threshold, f_null, f_u, 1.0) - 1.0


# critical(tested, level, rows): per op of ``rows`` (indices into the ops of the boolean mask
# ``tested``; None: all), the log change its run-to-run null rejects at ``level`` (one per op of
# ``tested``) with that op's change at the top, when only the ops of ``tested`` are tested
Critical = Callable[[np.ndarray, np.ndarray, "list[int] | None"], np.ndarray]


def _figures(changes: np.ndarray, critical: np.ndarray, level: np.ndarray, samples: list,
             threshold: float, rows: list[int]) -> np.ndarray:
    """``detectable`` of the ops ``rows`` of one tested family (all of whose ``changes`` are
    given), each with its change at the top of the drift's median."""
    r = np.log1p(np.asarray(changes, float))
    finite = np.isfinite(r)
    shifts = np.full(len(r), math.nan)
    live = [i for i in rows if finite[i]]
    if finite.sum() >= noise.MIN_OPS_FOR_SPREAD and live:
        shifts[live] = np.median(noise.each_on_top(r, live), axis=1)
    return np.array([detectable(changes[i], r[i], shifts[i], float(critical[j]),
                                float(level[i]), *samples[i], threshold)
                     for j, i in enumerate(rows)])


def per_op(changes: np.ndarray, shares: tuple[np.ndarray, np.ndarray], weights: np.ndarray,
           samples: list[tuple[np.ndarray, np.ndarray]], critical: Critical, alpha: float,
           threshold: float, min_share: float) -> np.ndarray:
    """``detectable`` of each tested op, from the tested ops' changes, (baseline, candidate)
    shares of the step, Benjamini-Hochberg weights and (baseline, candidate) samples, and their
    run-to-run null (``critical``).

    Slowed enough to be flagged, an op's change lies above every other's, so the drift (a
    median) and the run-to-run noise (from a median absolute deviation) it is judged against are
    those with its change at the top: with 40 ops, one op moved from the middle to the top moved
    the median by a rank and took tau from 4.5% to 3.6% in a synthetic pair. And an op slowed by
    ``x`` takes a larger share of the candidate's step, so an op tested only for its candidate
    share (below ``min_share`` in the baseline) leaves the family once that share falls below
    ``min_share``: beyond ``x_k = (share_k / min_share - 1) / share_i``. That changes m, the
    weights, the median and tau: on draws from the real CPU runs, 2 of 240 slowdowns of a 5-12%
    collective went otherwise until this was taken in. Between consecutive ``x_k`` the family is
    fixed; the figure is the first interval's whose own figure (solved for its family) falls
    inside it."""
    changes = np.asarray(changes, float)
    base, cand = (np.asarray(x, float) for x in shares)
    n = len(changes)
    everyone = np.ones(n, dtype=bool)
    level = levels(alpha, weights)
    out = _figures(changes, critical(everyone, level, None), level, samples, threshold,
                   list(range(n)))
    for i in range(n):
        leaving = (base < min_share) & (cand >= min_share) & (np.arange(n) != i)
        if math.isnan(out[i]) or cand[i] <= 0 or not leaving.any():
            continue
        x = np.where(leaving, (cand / min_share - 1) / cand[i], np.inf)
        bounds = np.unique(x[np.isfinite(x)])
        if out[i] <= bounds[0]:
            continue  # flagged before any op leaves
        for lo, hi in zip(bounds, np.append(bounds[1:], np.inf)):
            tested = ~(x <= lo)  # beyond lo: the ops whose x_k <= lo have left
            idx = np.flatnonzero(tested)
            pos = int(np.searchsorted(idx, i))
            lv = levels(alpha, np.asarray(weights, float)[idx])
            d = _figures(changes[idx], critical(tested, lv, [pos]), lv,
                         [samples[k] for k in idx], threshold, [pos])[0]
            if max(d, lo) <= hi or hi == np.inf:
                out[i] = max(d, lo)
                break
    return out
