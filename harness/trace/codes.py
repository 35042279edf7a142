"""Names as integer codes, as the formats collect them: a trace's strings (modules, ops, program
ids, kernel names) coded once in one table (``Texts``), and codes in order of first appearance,
with pandas's hash table where this process has imported pandas, else with numpy
(``factorize``; the decode workers of ``harness.trace.parallel`` run without pandas).
"""
from __future__ import annotations

import sys

import numpy as np


class Texts:
    """Strings (modules, ops, program ids, kernel names) as integer codes, one table."""

    def __init__(self):
        self.code: dict[str, int] = {"": 0}
        self.text: list[str] = [""]

    def of(self, text: str) -> int:
        code = self.code.get(text)
        if code is None:
            code = self.code[text] = len(self.text)
            self.text.append(text)
        return code

    def codes(self, texts) -> np.ndarray:
        return np.fromiter((self.of(t) for t in texts), np.int64)

    def names(self) -> dict[int, str]:
        return dict(enumerate(self.text))

    def of_codes(self, codes: np.ndarray, names: dict, transform=lambda name: name
                 ) -> np.ndarray:
        """The code of ``transform(names[code])`` for every code ("" where ``names`` has
        none), looked up once per distinct code."""
        inverse, uniq = factorize(np.asarray(codes, np.int64))
        table = np.asarray([self.of(transform(names.get(c, ""))) for c in uniq.tolist()],
                           np.int64)
        return table[inverse] if len(uniq) else np.zeros(0, np.int64)


def factorize(values) -> tuple[np.ndarray, np.ndarray]:
    """(each value's code, from 0 in order of first appearance; the distinct values in that
    order), as ``pandas.factorize`` gives them for integers: with its hash table where this
    process has imported pandas, else (a decode worker, forked before pandas is imported:
    ``harness.trace.parallel``) with numpy, as fast on a trace's columns."""
    pd = sys.modules.get("pandas")
    return pd.factorize(values) if pd is not None else numpy_factorize(values)


def numpy_factorize(values) -> tuple[np.ndarray, np.ndarray]:
    """``factorize`` with numpy alone."""
    v = np.asarray(values)
    if not len(v):
        return np.zeros(0, np.int64), v
    # a trace's columns come in runs of one value (an execution's run id): code each run once
    heads = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
    codes, uniques = _first_order(v[heads])
    return np.repeat(codes, np.diff(np.append(heads, len(v)))), uniques


def _first_order(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``factorize`` of ``v`` with numpy: small non-negative integers (metadata ids) through a
    table indexed by value, anything else through a sort."""
    n = len(v)
    if v.dtype.kind in "iu" and v.min() >= 0 and v.max() < 4 * n + 4096:
        first = np.full(int(v.max()) + 1, n, np.int64)
        np.minimum.at(first, v, np.arange(n))
        present = np.flatnonzero(first < n)
        uniques = present[np.argsort(first[present])]
        code = np.empty(len(first), np.int64)
        code[uniques] = np.arange(len(uniques))
        return code[v], uniques.astype(v.dtype)
    uniques, first, inverse = np.unique(v, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], uniques[order]


def tuple_codes(*columns: np.ndarray) -> np.ndarray:
    """One code per distinct tuple of the columns' values (equal tuples, equal codes), from 0
    in order of first appearance."""
    key = np.zeros(len(columns[0]), np.int64)
    for col in columns:
        codes, uniques = factorize(np.asarray(col))
        key, _ = factorize(key * max(len(uniques), 1) + codes)
    return key


def firsts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values, each one's first index), in order of first appearance."""
    codes, uniques = factorize(np.asarray(values))
    earlier = np.maximum.accumulate(np.concatenate([[-1], codes[:-1]])) if len(codes) else codes
    return np.asarray(uniques), np.flatnonzero(codes > earlier)
