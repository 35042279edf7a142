"""Rows of many devices at once: sorted by device and time, cut into runs (one device's, one
step's), and the per-run figures the waits need (``harness.step.waits``), with no Python loop
over devices or steps.

A sort by several integer keys is one stable ``argsort`` of one int64 key that orders as they
do (each key less its minimum, in mixed radix), where the keys' ranges fit in it; else
``np.lexsort`` of as few such keys as hold them: each gives the same order, and none where the
rows are in order already. Events come in long runs already in order (one device's ops of one
step), which a stable ``argsort`` (timsort) merges in a few passes.
"""
from __future__ import annotations

import numpy as np

_FITS = 1 << 62


def combined(*keys: np.ndarray) -> np.ndarray | None:
    """One int64 per row that orders as ``keys`` (major first) do, or None where their ranges
    do not fit in one."""
    out, total = np.zeros(len(keys[0]), np.int64), 1
    for k in keys:
        lo, hi = (int(k.min()), int(k.max())) if len(k) else (0, 0)
        total *= hi - lo + 1
        if total >= _FITS:
            return None
        if hi > lo:  # out * (its range) + (k - lo), in place
            out *= hi - lo + 1
            out += k
            out -= lo
    return out


def order(*keys: np.ndarray) -> np.ndarray:
    """The stable order of the rows by ``keys``, major first (``np.lexsort`` of them
    reversed)."""
    if in_order(*keys):
        return np.arange(len(keys[0]))
    merged = _merged(keys)
    if len(merged) == 1:
        return np.argsort(merged[0], kind="stable")
    return np.lexsort(merged[::-1])


def _merged(keys) -> list[np.ndarray]:
    """``keys`` (major first) as fewer keys that order as they do: each run of them whose
    ranges fit in one int64 made one (``combined``)."""
    out, total = [], _FITS
    for k in keys:
        k = k.astype(np.int64, copy=False)  # (k - lo in k's own type could overflow)
        lo, hi = (int(k.min()), int(k.max())) if len(k) else (0, 0)
        if total * (hi - lo + 1) < _FITS:  # into the key before
            out[-1] = out[-1] * (hi - lo + 1) + (k - lo)
            total *= hi - lo + 1
        else:  # a key of its own
            out.append(k - lo if hi - lo + 1 < _FITS else k)
            total = hi - lo + 1
    return out


def in_order(*keys: np.ndarray) -> bool:
    """Whether the rows are sorted by ``keys`` (major first) already."""
    before = np.zeros(max(len(keys[0]) - 1, 0), bool)  # ordered by a key before this one
    for k in keys:
        if np.any(~before & (k[1:] < k[:-1])):
            return False
        before |= k[1:] > k[:-1]
    return True


def starts(*keys: np.ndarray) -> np.ndarray:
    """Whether each row (of rows sorted by ``keys``) starts a run: its first, or its keys
    differ from the row before's."""
    new = np.zeros(len(keys[0]), bool)
    new[:1] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return new


def reach(new: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per row, the latest of ``e`` so far in its run (``new``: where one starts)."""
    if not len(e):
        return e.copy()
    run = np.cumsum(new) - 1
    key = combined(run, e)
    if key is None:
        return _reach_each(new, e)
    span = int(e.max()) - int(e.min()) + 1  # the runs made one rising sequence, and back
    return np.maximum.accumulate(key) - run * span + int(e.min())


def _reach_each(new: np.ndarray, e: np.ndarray) -> np.ndarray:
    first = np.append(np.flatnonzero(new), len(e))
    return np.concatenate([np.maximum.accumulate(e[a:b]) for a, b in zip(first[:-1], first[1:])])


def unions(new: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run (``new``: where one starts) of intervals [s, e) sorted by start: their union as
    disjoint pieces, the runs' pieces one after another (``harness.step.timeline.merged`` of
    each run)."""
    if not len(s):
        return s[:0], e[:0]
    r = reach(new, e)
    first = np.flatnonzero(new | np.insert(s[1:] > r[:-1], 0, True))  # a piece starts
    # a piece ends at the latest end so far at its last interval
    return s[first], r[np.append(first[1:] - 1, len(s) - 1)]


def joined(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals [s, e), sorted, with those that touch made one (``merged`` of
    them, which need not sort them again)."""
    if not len(s):
        return s, e
    first = np.flatnonzero(np.insert(s[1:] > e[:-1], 0, True))  # a gap before: a new piece
    return s[first], e[np.append(first[1:] - 1, len(s) - 1)]


def covered(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Per interval [a, b), how much of it the union (disjoint, sorted ``us``/``ue``)
    covers."""
    if not len(us) or not len(a):
        return np.zeros(len(a), np.int64)
    before = np.concatenate([[0], np.cumsum(ue - us)])

    def upto(t):  # union length before t
        i = np.searchsorted(us, t, side="right")
        j = np.maximum(i - 1, 0)
        return np.where(i > 0, before[j] + np.minimum(t, ue[j]) - us[j], 0)

    return upto(np.asarray(b)) - upto(np.asarray(a))
