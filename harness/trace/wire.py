"""The protobuf wire format of an XSpace line, read with numpy: no Python work per event.

A line's events are length-delimited records (``XLine.events``, field 4). Protobuf's C parser
splits them (``XLineSplit``: one call gives each event's size); numpy then reads their fields
for all events of the line at once, field by field ("in lockstep": each step reads the next
field of every event that has one). Every writer of XPlanes (XLA's C++ profiler, protobuf's
serializers) writes an event's fields in field-number order: ``metadata_id`` (1), ``offset_ps``
(2), ``duration_ps`` (3), then its stats (4). So ``read_line`` reads every event's metadata id,
``Line.events(rows)`` the times of the events a layout keeps, and ``Events.stats`` /
``Events.nth_stat`` the stats it asks for, each only where asked.

Wire types (protobuf encoding): 0 varint, 1 fixed 8 bytes, 2 length-delimited, 5 fixed 4 bytes.
Damaged bytes raise ``WireError`` (a ``DecodeError``, as protobuf's own parser raises).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from harness.trace.xplane import XLineSplit

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
# XEvent's fields by wire tag (field number << 3 | wire type); XLine.events has the stats' tag
MID_TAG, OFFSET_TAG, DURATION_TAG, STATS_TAG = 1 << 3, 2 << 3, 3 << 3, 4 << 3 | LEN
EVENTS_TAG = STATS_TAG
# XStat's value (its oneof): the field number names the kind
DOUBLE, UINT64, INT64, STR, BYTES, REF = 2, 3, 4, 5, 6, 7
# events read per numpy pass: their arrays stay in cache (a line of millions of events read
# at once runs 1.5 to 3x slower per event)
BLOCK = 1 << 17


def _blocks(n: int):
    """Slices of ``range(n)``, ``BLOCK`` long."""
    return [slice(i, min(i + BLOCK, n)) for i in range(0, n, BLOCK)] or [slice(0, 0)]


class WireError(DecodeError):
    """Bytes that are not a well-formed XLine."""


def varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position ``at`` of ``buf`` (uint8): (values as int64, the
    position after each). One byte of every varint per step: short ones cost least."""
    byte = buf[at]
    after = at + 1
    more = np.flatnonzero(byte >= 0x80)
    if not len(more):
        return byte.astype(np.int64), after
    value = (byte & 0x7F).astype(np.uint64)
    shift = 7
    while len(more):
        if shift > 63:
            raise WireError("a varint longer than 10 bytes")
        where = after[more]
        byte = buf[where]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[more] = where + 1
        more = more[byte >= 0x80]
        shift += 7
    return value.view(np.int64), after


def _tag_is(buf: np.ndarray, at: np.ndarray, end: np.ndarray, tag: int) -> np.ndarray:
    """Whether a field with wire tag ``tag`` (one byte) starts at each ``at`` before ``end``."""
    return (at < end) & (buf[np.minimum(at, len(buf) - 1)] == tag)


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


@dataclass
class Events:
    """Some events of one line as columns: ``index`` (each one's place in the line),
    ``metadata_id``, ``offset_ps`` and ``duration_ps`` (protobuf's default, 0, where left out),
    and where each one's stats begin and it ends in ``buf``, the line's bytes."""

    timestamp_ns: int
    index: np.ndarray
    metadata_id: np.ndarray
    offset_ps: np.ndarray
    duration_ps: np.ndarray
    stats_at: np.ndarray
    end: np.ndarray
    buf: np.ndarray

    def __len__(self) -> int:
        return len(self.metadata_id)

    @property
    def start_ns(self) -> np.ndarray:
        """Each event's start on the trace clock in whole ns (offsets are ps after the line's
        timestamp): (timestamp_ps + offset_ps) // 1000."""
        return (self.timestamp_ns * 1000 + self.offset_ps) // 1000

    @property
    def duration_ns(self) -> np.ndarray:
        return self.duration_ps // 1000

    def stats(self, rows: np.ndarray | None = None, ids: list[int] | None = None) -> Stats:
        """The stats of the events ``rows`` (default: all): every one, or those whose
        metadata id is one of ``ids`` (the others are stepped over, their values not read)."""
        rows = np.arange(len(self)) if rows is None else np.sort(np.asarray(rows, np.int64))
        return Stats.joined([self._stats(rows[b], ids) for b in _blocks(len(rows))])

    def _stats(self, rows: np.ndarray, ids: list[int] | None) -> Stats:
        buf, last = self.buf, len(self.buf) - 1
        wanted = None if ids is None else _id_table(ids)
        at, end, slot = self.stats_at[rows], self.end[rows], np.arange(len(rows))
        found = []
        try:
            while len(slot):  # one stat of every event per step
                go = (at < end) & (buf[np.minimum(at, last)] == STATS_TAG)
                if not go.all():
                    at, end, slot = at[go], end[go], slot[go]
                size, payload = varints(buf, at + 1)
                at = payload + size
                if (at > end).any() or (size < 0).any():
                    raise WireError("a stat runs past the end of its event")
                if wanted is None:
                    found.append((slot, payload, at))
                    continue
                # its id first, as writers put it: stepped over unless wanted (else read all)
                keep = ~((payload < at) & (buf[np.minimum(payload, last)] == MID_TAG))
                first = np.flatnonzero(~keep)
                mid, _ = varints(buf, payload[first] + 1)
                keep[first] = wanted[np.clip(mid, 0, len(wanted) - 1)] & (mid < len(wanted))
                found.append((slot[keep], payload[keep], at[keep]))
        except IndexError:
            raise WireError("a stat runs past the end of its line") from None
        # entries by event, each event's in order: its stats come one per step
        count = np.zeros(len(rows), np.int64)
        for s, _, _ in found:
            count[s] += 1
        place = np.cumsum(count) - count  # where each event's next entry goes
        begin, stop = np.zeros(int(count.sum()), np.int64), np.zeros(int(count.sum()), np.int64)
        for s, b, e in found:
            begin[place[s]], stop[place[s]] = b, e
            place[s] += 1
        return _stat_fields(buf, np.repeat(rows, count), begin, stop, ids)

    def planned_ints(self, places: np.ndarray, stat_ids: list[int]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """(value, found), each (events, columns): for column j, the integer value of each
        event's stat at place ``places[:, j]`` (from 0), found where that stat is there, has
        metadata id ``stat_ids[j]`` and holds just an int64 or uint64 (False otherwise: the
        layout then reads that event's stats in full). A stat's place, where a layout knows it,
        spares reading the stats around it."""
        places = np.asarray(places, np.int64)
        parts = [self.part(b)._planned_ints(places[b], stat_ids) for b in _blocks(len(self))]
        return tuple(np.concatenate(c) for c in zip(*parts))

    def part(self, rows: slice) -> Events:
        """The events of the slice ``rows``."""
        return Events(self.timestamp_ns, *(getattr(self, f)[rows] for f in (
            "index", "metadata_id", "offset_ps", "duration_ps", "stats_at", "end")), self.buf)

    def _planned_ints(self, places: np.ndarray, stat_ids: list[int]
                      ) -> tuple[np.ndarray, np.ndarray]:
        n, steps = len(places), int(places.max()) + 1 if places.size else 0
        buf, last = self.buf, len(self.buf) - 1
        begin = np.full((steps, n), -1, np.int64)  # where each event's stat of each place begins
        stop = np.zeros((steps, n), np.int64)
        live, at, end = np.arange(n), self.stats_at.copy(), self.end
        try:
            for step in range(steps):  # one stat of every event per step
                go = (at < end[live]) & (buf[np.minimum(at, last)] == STATS_TAG)
                if not go.all():
                    live, at = live[go], at[go]
                size, payload = varints(buf, at + 1)
                at = payload + size
                if (at > end[live]).any() or (size < 0).any():
                    raise WireError("a stat runs past the end of its event")
                begin[step, live], stop[step, live] = payload, at
            value, found = np.zeros(places.shape, np.int64), np.zeros(places.shape, bool)
            rows = np.arange(n)
            for j, stat_id in enumerate(stat_ids):
                has = np.flatnonzero(places[:, j] >= 0)
                b, e = begin[places[has, j], has], stop[places[has, j], has]
                has, b, e = has[b >= 0], b[b >= 0], e[b >= 0]
                ok, v = _int_stat(buf, b, e, stat_id)
                value[has[ok], j], found[has[ok], j] = v, True
        except IndexError:
            raise WireError("a stat runs past the end of its line") from None
        del rows
        return value, found


def _id_table(ids: list[int]) -> np.ndarray:
    """A lookup table of the metadata ids ``ids``: ``table[id]`` is True for each."""
    ids = np.asarray([i for i in ids if i is not None and 0 <= i < 1 << 24], np.int64)
    table = np.zeros(int(ids.max()) + 1 if len(ids) else 1, bool)
    table[ids] = True
    return table


def _int_stat(buf: np.ndarray, at: np.ndarray, end: np.ndarray, stat_id: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """(which of the stats [at, end) are just metadata id ``stat_id`` and an int64 or uint64,
    the values of those)."""
    ok = _tag_is(buf, at, end, MID_TAG)
    mid, at = varints(buf, at[ok] + 1)
    hit = (mid == stat_id) & (at < end[ok])
    ok[ok] = hit
    at = at[hit]
    tag = buf[at]
    is_int = (tag == INT64 << 3 | VARINT) | (tag == UINT64 << 3 | VARINT)
    v, after = varints(buf, at[is_int] + 1)
    whole = after == end[ok][is_int]  # the value is the stat's last field
    ok[ok] = is_int
    ok[ok] = whole
    return ok, v[whole]


def _stat_fields(buf, owner, at, end, ids=None) -> Stats:
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
    if _tag_is(buf, at, end, MID_TAG).all():  # the usual layout: the metadata id comes first
        mid, at = varints(buf, at + 1)
    if ids is not None:
        keep = np.isin(mid, ids)
        owner, mid, at, end = owner[keep], mid[keep], at[keep], end[keep]
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
    return Stats(owner, mid, kind, value, number, text_at, text_size, buf)


@dataclass
class Line:
    """One line's events, located: each one's metadata id, where its bytes begin and end in
    ``buf`` (the line's bytes) and where its fields after the metadata id begin (``at``)."""

    timestamp_ns: int
    metadata_id: np.ndarray
    start: np.ndarray
    at: np.ndarray
    end: np.ndarray
    buf: np.ndarray

    def __len__(self) -> int:
        return len(self.metadata_id)

    def events(self, rows: np.ndarray | None = None) -> Events:
        """The events ``rows`` (indices into the line; default: all) with their times."""
        index = np.arange(len(self)) if rows is None else np.asarray(rows, np.int64)
        parts = [self._events(index[b]) for b in _blocks(len(index))]
        if len(parts) == 1:
            return parts[0]
        return Events(self.timestamp_ns, index, *(np.concatenate([getattr(p, f) for p in parts])
                                                  for f in ("metadata_id", "offset_ps",
                                                            "duration_ps", "stats_at", "end")),
                      self.buf)

    def _events(self, index: np.ndarray) -> Events:
        mid, at, end = self.metadata_id[index], self.at[index], self.end[index]
        columns = {OFFSET_TAG: np.zeros(len(index), np.int64),
                   DURATION_TAG: np.zeros(len(index), np.int64)}
        live = np.arange(len(index))
        buf, last = self.buf, len(self.buf) - 1
        try:
            for _ in range(len(columns) + 1):  # the leading fields after the id, in order
                where = at[live]
                tag = buf[np.minimum(where, last)]
                first = tag[0] if len(tag) else 0
                if (tag == first).all() and first in (OFFSET_TAG, DURATION_TAG, MID_TAG):
                    # every event holds the same field next (the usual case): read it at once
                    live = live[where < end[live]]
                    value, at[live] = varints(buf, at[live] + 1)
                    (mid if first == MID_TAG else columns[first])[live] = value
                    continue
                lead = (where < end[live]) & (
                    (tag == OFFSET_TAG) | (tag == DURATION_TAG) | (tag == MID_TAG))
                live, tag = live[lead], tag[lead]
                if not len(live):
                    break
                value, after = varints(buf, at[live] + 1)
                for t, column in ((MID_TAG, mid), *columns.items()):
                    hit = tag == t
                    column[live[hit]] = value[hit]
                at[live] = after
        except IndexError:
            raise WireError("an event runs past the end of its line") from None
        if (at > end).any():
            raise WireError("an event's field runs past the end of the event")
        return Events(self.timestamp_ns, index, mid, columns[OFFSET_TAG],
                      columns[DURATION_TAG], at, end, self.buf)


def read_line(raw) -> Line:
    """Locate the events of one serialized XLine (bytes or a memoryview) and read each one's
    metadata id."""
    try:
        return _read_line(raw)
    except IndexError:
        raise WireError("an event runs past the end of its line") from None


def _read_line(raw) -> Line:
    line = XLineSplit.FromString(raw)
    n = len(line.events)
    size = np.fromiter(map(len, line.events), np.int64, n)
    buf = np.frombuffer(raw, np.uint8)
    start = _back_to_back(raw, buf, size)
    if start is None:  # not written back to back: lay them out so
        buf = np.frombuffer(b"".join(line.events), np.uint8)
        start = np.cumsum(size) - size
    end = start + size
    mid, at = np.zeros(n, np.int64), start.copy()
    for b in _blocks(n):
        first = np.flatnonzero(_tag_is(buf, start[b], end[b], MID_TAG)) + b.start
        mid[first], at[first] = varints(buf, start[first] + 1)
    return Line(line.timestamp_ns, mid, start, at, end, buf)


def _back_to_back(raw, buf: np.ndarray, size: np.ndarray) -> np.ndarray | None:
    """Where each event's bytes begin in ``raw``, given their sizes, when the events follow
    the line's first fields back to back as writers lay them out (checked: an events record of
    that size begins at each); None otherwise."""
    pos = 0
    while pos < len(buf) and buf[pos] != EVENTS_TAG:  # the line's own fields come first
        tag, pos = _varint(raw, pos)
        wire = tag & 7
        if wire == VARINT:
            _, pos = _varint(raw, pos)
        elif wire == LEN:
            n, pos = _varint(raw, pos)
            pos += n
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        else:
            return None
    if (size >= 1 << 21).any():
        return None  # an event of 2 MB or more: not laid out here
    header = 1 + np.where(size < 1 << 7, 1, np.where(size < 1 << 14, 2, 3))
    start = pos + np.cumsum(header + size) - size
    if len(start) and start[-1] + size[-1] > len(buf):
        return None
    tag_at = start - header
    for b in _blocks(len(start)):
        if not ((buf[tag_at[b]] == EVENTS_TAG).all() and
                (varints(buf, tag_at[b] + 1)[0] == size[b]).all()):
            return None
    return start


def _varint(raw, pos: int) -> tuple[int, int]:
    """One varint of ``raw`` at ``pos`` (a line's header): (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(raw):
            raise WireError("a line's header is cut short")
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
