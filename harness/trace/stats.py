"""An XSpace line's stats read as columns (``Stats``): the fields of many stat records at once,
field by field (``stat_fields``). ``harness.trace.wire`` finds the records.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.trace.varint import (
    BYTES,
    DOUBLE,
    FIXED32,
    FIXED64,
    INT64,
    LEN,
    MID_TAG,
    REF,
    STR,
    UINT64,
    VARINT,
    WireError,
    tag_is,
    varints,
)


@dataclass
class Stats:
    """Some stats of some events, one entry each, by event and in each event's order: the
    event (``row``, an index into ``Events``), the stat's metadata id, its kind (``DOUBLE`` ...
    ``REF``; 0: none), its value (varint kinds, as int64; ``DOUBLE`` in ``number``), and where
    a ``STR``/``BYTES`` value lies in the line's buffer (``at``, ``size``)."""

    row: np.ndarray
    metadata_id: np.ndarray
    kind: np.ndarray
    value: np.ndarray
    number: np.ndarray
    at: np.ndarray
    size: np.ndarray
    buf: np.ndarray

    def __len__(self) -> int:
        return len(self.row)

    def text(self, i: int) -> str | bytes:
        """The ``STR`` (decoded) or ``BYTES`` value of entry ``i``."""
        raw = self.buf[self.at[i]:self.at[i] + self.size[i]].tobytes()
        return raw.decode("utf-8", "replace") if self.kind[i] == STR else raw

    @classmethod
    def joined(cls, parts: list[Stats]) -> Stats:
        """The entries of ``parts`` (of one line, by event) one after another."""
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("row", "metadata_id", "kind", "value", "number", "at", "size")),
                   parts[0].buf)

    def entry(self, stat_id: int | None, rows: int) -> np.ndarray:
        """The entry of stat ``stat_id`` in each of ``rows`` events, -1 where it has none
        (of several, the last, as protobuf's parser keeps the last)."""
        out = np.full(rows, -1, np.int64)
        if stat_id is None:
            return out
        hit = np.flatnonzero(self.metadata_id == stat_id)
        owner = self.row[hit]
        last = np.ones(len(hit), bool)
        last[:-1] = owner[1:] != owner[:-1]
        out[owner[last]] = hit[last]
        return out


def wanted_ids(ids: list[int]):
    """Whether each of an array of metadata ids is one of ``ids``: a lookup table where ids
    are as writers number them (under 2**24), ``np.isin`` for the others."""
    ids = [i for i in ids if i is not None]
    small = np.asarray([i for i in ids if 0 <= i < 1 << 24], np.int64)
    large = [i for i in ids if not 0 <= i < 1 << 24]
    table = np.zeros(int(small.max()) + 1 if len(small) else 1, bool)
    table[small] = True

    def wanted(mid: np.ndarray) -> np.ndarray:
        out = table[np.clip(mid, 0, len(table) - 1)] & (mid >= 0) & (mid < len(table))
        return out | np.isin(mid, large) if large else out
    return wanted


def stat_fields(buf, owner, at, end, ids=None) -> Stats:
    """Read the fields of every stat (records [at, end) of ``buf``), field by field. A stat's
    first field is its metadata id; those whose id is not one of ``ids`` (if given) are left
    out before their values are read."""
    try:
        return _read_stat_fields(buf, owner, at, end, ids)
    except IndexError:
        raise WireError("a stat runs past the end of its line") from None


def _read_stat_fields(buf, owner, at, end, ids) -> Stats:
    n = len(owner)
    mid = np.zeros(n, np.int64)
    first = tag_is(buf, at, end, MID_TAG)  # the usual layout: the metadata id comes first
    if first.all():
        mid, at = varints(buf, at + 1)
    else:
        at = at.copy()
        mid[first], at[first] = varints(buf, at[first] + 1)
    if ids is not None:  # a stat whose id comes later is left out once its id is read
        keep = np.isin(mid, ids) | ~first
        owner, mid, at, end, first = owner[keep], mid[keep], at[keep], end[keep], first[keep]
        n = len(owner)
    kind, value = np.zeros(n, np.int64), np.zeros(n, np.int64)
    number = np.zeros(n, np.float64)
    text_at, text_size = np.zeros(n, np.int64), np.zeros(n, np.int64)
    rows, at = np.arange(n), at.copy()
    while len(rows):
        rows = rows[at[rows] < end[rows]]
        if not len(rows):
            break
        tag, after = varints(buf, at[rows])
        field, wire = tag >> 3, tag & 7
        nxt = np.empty_like(after)
        is_varint = wire == VARINT
        if is_varint.any():
            v, past = varints(buf, after[is_varint])
            r, f = rows[is_varint], field[is_varint]
            mid[r[f == 1]] = v[f == 1]
            val = (f == UINT64) | (f == INT64) | (f == REF)
            value[r[val]], kind[r[val]] = v[val], f[val]
            nxt[is_varint] = past
        is_double = wire == FIXED64
        if is_double.any():
            r, f, a = rows[is_double], field[is_double], after[is_double]
            dbl = f == DOUBLE
            eight = np.ascontiguousarray(buf[a[dbl][:, None] + np.arange(8)])
            number[r[dbl]], kind[r[dbl]] = eight.view("<f8").ravel(), DOUBLE
            nxt[is_double] = a + 8
        is_len = wire == LEN
        if is_len.any():
            size, payload = varints(buf, after[is_len])
            r, f = rows[is_len], field[is_len]
            txt = (f == STR) | (f == BYTES)
            text_at[r[txt]], text_size[r[txt]], kind[r[txt]] = payload[txt], size[txt], f[txt]
            nxt[is_len] = payload + size
        is_fixed32 = wire == FIXED32
        nxt[is_fixed32] = after[is_fixed32] + 4
        if not (is_varint | is_double | is_len | is_fixed32).all():
            raise WireError("a stat holds a field of an unknown wire type")
        if (nxt > end[rows]).any():
            raise WireError("a stat's field runs past the end of the stat")
        at[rows] = nxt
    st = Stats(owner, mid, kind, value, number, text_at, text_size, buf)
    if ids is not None and not first.all():
        keep = np.isin(mid, ids)
        st = Stats(*(getattr(st, f)[keep] for f in (
            "row", "metadata_id", "kind", "value", "number", "at", "size")), buf)
    return st
