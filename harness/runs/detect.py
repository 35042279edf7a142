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


def per_op(changes: np.ndarray, critical: np.ndarray, level: np.ndarray,
           samples: list[tuple[np.ndarray, np.ndarray]], threshold: float) -> np.ndarray:
    """``detectable`` of each tested op, from its change, the critical log change of its
    run-to-run null with its change at the top (``noise.critical_on_top``; with a history, its
    own spread's), its level and its (baseline, candidate) samples. The drift is likewise the
    median with the op's change at the top: slowed enough to be flagged, it lies above every
    other's, and with 40 ops one op moved from the middle to the top moves the median by a
    rank (and took tau from 4.5% to 3.6% in a synthetic pair)."""
    changes = np.asarray(changes, float)
    r = np.log1p(changes)
    finite = np.isfinite(r)
    shifts = np.full(len(r), math.nan)
    if finite.sum() >= noise.MIN_OPS_FOR_SPREAD:
        shifts[finite] = np.median(noise.each_on_top(r[finite]), axis=1)
    return np.array([detectable(changes[i], r[i], shifts[i], float(critical[i]),
                                float(level[i]), *samples[i], threshold)
                     for i in range(len(r))])
