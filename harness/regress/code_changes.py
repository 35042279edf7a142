"""Change points where the code changed: the verdict's own test on the nights either side.

E-divisive (``harness.regress.changepoints``) asks nothing of the nights but their values, and
pays for it in nights: its permutation test over 7 nights has 35 distinct splits, so no p-value
reaches its 0.01, and a clean 2x step after a commit (nights 5-7 of 7) went unseen while the
newer nights widened the "stable" spread. Where the code changed between two nights (their
commit or their programs' HLO fingerprints, ``noise.code``) the history knows where a change
could start, and needs no search for it: the nights before and after are two samples of runs
of two codes, judged as ``harness compare`` judges two sides (``figures.worse``): the change is
the difference of their mean log values, its error their pooled spread (never under the
nights' own errors) times sqrt(1/m + 1/n), weighed by Student's t with m + n - 2 degrees of
freedom; it stands when beyond the ``--fail-on`` step threshold and significant at ``alpha``
over the changes of code the segment holds (Bonferroni: a history with a commit every night
tests each). Binary segmentation: the most significant change of code splits its segment, and
each side is tested again; at least ``MIN_NIGHTS`` nights on each side: with 2, a point whose
runs land in one of two modes at random (the all-reduce at 2.2 ms or 4.6 ms) looked like a step
in 2 of 20 flat 5-night histories (2 nights then 3 in the other mode: 1 in 16 per change
of code);
until 3 nights follow a change of code, the newest night is judged against the nights before
it (``harness.regress.trend``), so the step stays flagged until then.
"""
from __future__ import annotations

import math

import numpy as np

from harness.regress import figures
from harness.regress.changepoints import ChangePoint

MIN_NIGHTS = 3  # nights on each side of a change of code, at least (fewer: see below)


def boundaries(codes: list[str]) -> list[int]:
    """The nights (indices) whose code differs from the night before's."""
    return [i for i in range(1, len(codes)) if codes[i] != codes[i - 1]]


def weigh(a: np.ndarray, b: np.ndarray, floor: float) -> tuple[float, float, float]:
    """(log change of ``b``'s mean over ``a``'s, its standard error, degrees of freedom): the
    pooled spread of both sides about their own means, at least ``floor`` (the nights' own
    error)."""
    m, n = len(a), len(b)
    ss = float(np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2))
    s = max(math.sqrt(ss / (m + n - 2)), floor)
    return float(b.mean() - a.mean()), s * math.sqrt(1 / m + 1 / n), m + n - 2


def best(x: np.ndarray, cuts: list[int], lo: int, hi: int, floor: float, threshold: float,
         alpha: float) -> ChangePoint | None:
    """The most significant change of code in nights [lo, hi) that stands (the module
    docstring), its p-value times the changes tested; None where none does."""
    tried = [c for c in cuts if lo + MIN_NIGHTS <= c <= hi - MIN_NIGHTS]
    found = None
    for c in tried:
        a, b = x[lo:c], x[c:hi]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if min(len(a), len(b)) < MIN_NIGHTS:
            continue
        r, se, df = weigh(a, b, floor)
        p = min(1.0, figures.tail(abs(r) / se, df) * len(tried)) if se > 0 else 0.0
        if abs(r) > math.log1p(threshold) and p <= alpha and (found is None
                                                             or p < found.p_value):
            found = ChangePoint(c, p)
    return found


def at_code_changes(x, codes: list[str], errors=None, threshold: float = 0.10,
                    alpha: float = 0.01) -> list[ChangePoint]:
    """The change points of series ``x`` (log values, one per night) at changes of ``codes``
    (the module docstring), in order; ``errors``: each night's own error of its value, whose
    root mean square floors the spread."""
    x = np.asarray(x, float)
    e = np.asarray(errors if errors is not None else [], float)
    e = e[np.isfinite(e)]
    floor = float(np.sqrt(np.mean(e ** 2))) if len(e) else 0.0
    cuts = boundaries(list(codes))
    found: list[ChangePoint] = []
    todo = [(0, len(x))]
    while todo:
        lo, hi = todo.pop()
        c = best(x, cuts, lo, hi, floor, threshold, alpha)
        if c is not None:
            found.append(c)
            todo += [(lo, c.index), (c.index, hi)]
    return sorted(found, key=lambda c: c.index)
