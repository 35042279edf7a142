"""Where a series of nights changed: E-divisive means, placed after the fact.

The method is Matteson and James's E-divisive (D. S. Matteson, N. A. James, "A Nonparametric
Approach for Multiple Change Point Analysis of Multivariate Data", JASA 109 (2014) 334-345), the
one Apache Otava (formerly Hunter: D. Daly et al., "Change Point Detection in Software
Performance Testing", ICPE 2020; M. Fleming et al., "Hunter: Using Change Point Detection to
Hunt for Performance Regressions", ICPE 2023) runs over a benchmark's history. A split of a
segment at ``tau`` is scored by the energy distance between the values before and after it,

    Q(tau) = m n / (m + n) * (2 E|X - Y| - E|X - X'| - E|Y - Y'|)

(X before, Y after, m and n their counts; exponent 1 on the distances), maximised over ``tau``;
the split stands when a permutation test (the values shuffled ``permutations`` times, the
statistic's maximum recomputed) gives it a p-value at or under the significance level
``alpha``; then each side is split again, until no split is significant. The energy distance
compares whole distributions, not means, so a point whose nights land in two modes (a CPU
collective at 2.2 ms one night and 4.6 ms the next) has no change while it keeps landing in
both, and one when both modes move. The significance level is the only threshold.

Each night is weighed by its uncertainty (``weights``: the inverse of its variance, so a night
pooled from repeats or confirmations counts for more): the expectations above become weighted
means over the pairs, and m and n the sums of the weights (with equal weights, the paper's
statistic); the permutations shuffle values and weights together.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHA = 0.01        # the significance level of each split
PERMUTATIONS = 999  # the permutation test's shuffles (p-values in steps of 1/1000)
MIN_SIZE = 3        # nights on each side of a split, at least
SEED = 0            # the permutations' seed: the same history gives the same change points


@dataclass(frozen=True)
class ChangePoint:
    """A change at night ``index`` (the first night of the new segment), its p-value."""

    index: int
    p_value: float


def _scores(x: np.ndarray, w: np.ndarray, min_size: int) -> np.ndarray:
    """Q(tau) for each split tau in [min_size, n - min_size] (the module docstring)."""
    n = len(x)
    d = np.abs(x[:, None] - x[None, :]) * w[:, None] * w[None, :]
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = d.cumsum(0).cumsum(1)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    t = np.arange(min_size, n - min_size + 1)
    aa, ab = s[t, t], s[t, n] - s[t, t]
    bb = s[n, n] - 2 * s[t, n] + s[t, t]
    wa, wb = cw[t], cw[n] - cw[t]
    energy = 2 * ab / (wa * wb) - aa / wa ** 2 - bb / wb ** 2
    return wa * wb / (wa + wb) * energy


def best_split(x: np.ndarray, w: np.ndarray, min_size: int = MIN_SIZE) -> tuple[int, float]:
    """(tau, Q): the split of the segment that maximises Q; (-1, NaN) for one too short."""
    if len(x) < 2 * min_size:
        return -1, float("nan")
    q = _scores(x, w, min_size)
    i = int(np.argmax(q))
    return i + min_size, float(q[i])


def p_value(x: np.ndarray, w: np.ndarray, q: float, rng: np.random.Generator,
            permutations: int = PERMUTATIONS, alpha: float = ALPHA,
            min_size: int = MIN_SIZE) -> float:
    """The permutation test's p-value of the best split's ``q``: (1 + shuffles scoring at
    least q) / (1 + shuffles). Stops early once it cannot reach ``alpha`` (then the p-value
    is that of the shuffles so far, above alpha)."""
    hits, most = 0, alpha * (permutations + 1) - 1
    for k in range(permutations):
        order = rng.permutation(len(x))
        hits += best_split(x[order], w[order], min_size)[1] >= q
        if hits > most:
            return (1 + hits) / (2 + k)
    return (1 + hits) / (1 + permutations)


def e_divisive(x, weights=None, alpha: float = ALPHA, permutations: int = PERMUTATIONS,
               min_size: int = MIN_SIZE, seed: int = SEED) -> list[ChangePoint]:
    """The change points of series ``x`` (the module docstring), in order; ``weights`` each
    value's (default equal; NaN values and their weights are left out, their nights never
    start a segment)."""
    x = np.asarray(x, float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, float)
    keep = np.flatnonzero(np.isfinite(x) & np.isfinite(w) & (w > 0))
    xs, ws = x[keep], w[keep] / np.mean(w[keep]) if len(keep) else w[keep]
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    todo = [(0, len(xs))]
    while todo:
        lo, hi = todo.pop()
        tau, q = best_split(xs[lo:hi], ws[lo:hi], min_size)
        if tau < 0:
            continue
        p = p_value(xs[lo:hi], ws[lo:hi], q, rng, permutations, alpha, min_size)
        if p <= alpha:
            found.append(ChangePoint(int(keep[lo + tau]), p))
            todo += [(lo, lo + tau), (lo + tau, hi)]
    return sorted(found, key=lambda c: c.index)


def segments(n: int, points: list[ChangePoint]) -> list[tuple[int, int]]:
    """The [start, end) of each segment of ``n`` nights that ``points`` cut."""
    cuts = [0, *(c.index for c in points), n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
