"""An XSpace line read as columns with numpy: no Python work per event.

A line's events are length-delimited records (``XLine.events``, field 4). Protobuf's C parser
splits them (``XLineSplit``: one call gives each event's size); numpy then reads their fields
for all events of the line at once, field by field ("in lockstep": each step reads the next
field of every event that has one), ``BLOCK`` events at a time. Every writer of XPlanes (XLA's
C++ profiler, protobuf's serializers) writes an event's fields in field-number order:
``metadata_id`` (1), ``offset_ps`` (2), ``duration_ps`` (3), then its stats (4). So
``read_line`` reads every event's metadata id, ``Line.events(rows)`` the times of the events a
format keeps, and ``Events.stats`` the stats it asks for, each only where asked
(``harness.trace.statplans`` reads them where each event kind lays them out,
``harness.trace.stats`` reads the stat records, ``harness.trace.varint`` the varints).
Damaged bytes raise ``WireError`` (a ``DecodeError``, as protobuf's own parser does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.trace.stats import Stats, stat_fields, wanted_ids
from harness.trace.varint import (  # noqa: F401 (the wire's vocabulary, re-exported)
    BYTES,
    DOUBLE,
    DURATION_TAG,
    EVENTS_TAG,
    FIXED32,
    FIXED64,
    INT64,
    LEN,
    MID_TAG,
    OFFSET_TAG,
    REF,
    STATS_TAG,
    STR,
    UINT64,
    VARINT,
    WireError,
    blocks,
    tag_is,
    varint,
    varints,
)
from harness.trace.xplane import XLineSplit

SCAN = 1 << 22  # bytes of a line scanned at a time (``Line.holding``)


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
        return Stats.joined([self._stats(rows[b], ids) for b in blocks(len(rows))])

    def _stats(self, rows: np.ndarray, ids: list[int] | None) -> Stats:
        buf, last = self.buf, len(self.buf) - 1
        wanted = None if ids is None else wanted_ids(ids)
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
                keep[first] = wanted(mid)
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
        return stat_fields(buf, np.repeat(rows, count), begin, stop, ids)


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

    def holding(self, stat_id: int) -> np.ndarray:
        """The events (sorted indices) whose bytes hold, after their first, a metadata id
        field whose value ends in ``stat_id``'s low 7 bits: its tag (the one byte every writer
        writes), then a byte with those bits, as any encoding of the id begins. Every event
        with a stat ``stat_id`` is one of them (a few others too, whose bytes look alike); no
        stat is read. An id of 0 is written as no field at all: every event."""
        if stat_id == 0 or not len(self):  # (the line's own header may look like a hit)
            return np.arange(len(self))
        buf, low, hits = self.buf, stat_id & 0x7F, []
        for at in range(0, len(buf) - 1, SCAN):  # a piece at a time: small temporaries
            after = buf[at + 1:at + 1 + SCAN]
            hit = np.flatnonzero((after & 0x7F) == low) + at
            hits.append(hit[buf[hit] == MID_TAG])
        hit = np.concatenate(hits) if hits else np.zeros(0, np.int64)
        event = np.searchsorted(self.start, hit, side="right") - 1
        inside = (event >= 0) & (hit > self.start[event]) & (hit < self.end[event])
        return np.unique(event[inside])

    def events(self, rows: np.ndarray | None = None) -> Events:
        """The events ``rows`` (indices into the line; default: all) with their times."""
        index = np.arange(len(self)) if rows is None else np.asarray(rows, np.int64)
        parts = [self._events(index[b]) for b in blocks(len(index))]
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
    for b in blocks(n):
        first = np.flatnonzero(tag_is(buf, start[b], end[b], MID_TAG)) + b.start
        mid[first], at[first] = varints(buf, start[first] + 1)
    return Line(line.timestamp_ns, mid, start, at, end, buf)


def _back_to_back(raw, buf: np.ndarray, size: np.ndarray) -> np.ndarray | None:
    """Where each event's bytes begin in ``raw``, given their sizes, when the events follow
    the line's first fields back to back as writers lay them out (checked: an events record of
    that size begins at each); None otherwise."""
    pos = 0
    while pos < len(buf) and buf[pos] != EVENTS_TAG:  # the line's own fields come first
        tag, pos = varint(raw, pos)
        wire = tag & 7
        if wire == VARINT:
            _, pos = varint(raw, pos)
        elif wire == LEN:
            n, pos = varint(raw, pos)
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
    for b in blocks(len(start)):
        if not ((buf[tag_at[b]] == EVENTS_TAG).all() and
                (varints(buf, tag_at[b] + 1)[0] == size[b]).all()):
            return None
    return start
