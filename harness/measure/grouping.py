"""Millions of rows grouped by numpy, as pandas' ``groupby`` would group them.

The measured tables (``harness.measure.ops``), the programs that ran
(``harness.measure.programs``) and the
step's timeline (``harness.step.timeline``) group EVENTS by their keys: here each row's group
is numbered once, in the order ``groupby`` sorts the groups, and sums are taken by
``np.bincount`` (exact where every sum of the integers stays below 2**53).
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def exact_sums(values: np.ndarray) -> bool:
    """Whether ``np.bincount`` (which sums in float64) sums these integers exactly: every sum
    of them stays below 2**53."""
    return not len(values) or int(np.abs(values).max()) * len(values) < 2**53


def groups(frame: pd.DataFrame, by: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """(each row's group, the first row of each group), the groups numbered in the order
    ``groupby(by)`` sorts them (a categorical by its categories' order, numbers ascending);
    None where a value is missing (``groupby`` leaves such rows out)."""
    n = len(frame)
    columns = [_codes(frame[col]) for col in by]
    if n and any(codes.min() < 0 for codes, _ in columns):
        return None
    if np.prod([float(card) for _, card in columns]) > 4 * n + 1024:
        columns = [_present(codes, card, n) for codes, card in columns]
    key, size = np.zeros(n, np.int64), 1
    for codes, card in columns:  # the tuple as one number, digit by digit (in place)
        if size * card >= 2**62:  # renumber the tuples so far first, keeping their order
            _, key = np.unique(key, return_inverse=True)
            size = int(key.max()) + 1 if n else 1
        key *= card
        key += codes
        size *= card
    if size <= 4 * n + 1024:  # few possible tuples: rank them by counting
        rank = np.cumsum(np.bincount(key, minlength=size) > 0) - 1
        group = rank[key]
    else:
        _, group = np.unique(key, return_inverse=True)
    del key
    first = np.full(int(group.max()) + 1 if n else 0, n, np.int64)
    np.minimum.at(first, group, np.arange(n))
    return group, first


def _present(codes: np.ndarray, card: int, n: int) -> tuple[np.ndarray, int]:
    """Codes renumbered to count only the values present, in their order (fewer possible
    tuples: ``groups`` ranks them by counting where it can)."""
    if card > 4 * n + 1024:
        return codes, card
    present = np.bincount(codes, minlength=card) > 0
    if present.all():
        return codes, card
    return (np.cumsum(present) - 1)[codes], max(int(present.sum()), 1)


def _codes(col: pd.Series) -> tuple[np.ndarray, int]:
    """A column as integer codes from 0 (-1: missing), in the order ``groupby`` sorts its
    values, and how many codes there can be: a categorical's own codes, a small range of
    integers itself, anything else factorized in sorted order."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), max(len(col.cat.categories), 1)
    values = col.to_numpy()
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low < 1 << 24:
            return (values - low) if low else values, high - low + 1
    codes, uniques = pd.factorize(col, sort=True)
    return codes, max(len(uniques), 1)


def runs(frame: pd.DataFrame, by: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For a frame sorted by ``by``: each row's group (a run of equal keys, numbered from 0)
    and the first row of each group."""
    new = np.zeros(len(frame), bool)
    new[:1] = True
    for col in by:
        v = frame[col]
        v = (v.cat.codes if isinstance(v.dtype, pd.CategoricalDtype) else v).to_numpy()
        new[1:] |= v[1:] != v[:-1]
    return np.cumsum(new) - 1, np.flatnonzero(new)
