"""Chosen stats of a line's events, read where each event kind lays them out, every event
checked, each distinct value read once (``planned_values``).

XLA writes the stats of one kind of event (one metadata id: a GPU kernel) in the same order on
every event of it: a kernel's ``correlation_id``, ..., ``hlo_op``, ``hlo_module``,
``program_id``. So each kind's layout (the metadata ids of its stats, in order) is learned from
its first event, read in full (``Events.stats``), and the events of each layout are walked
record by record, all at once (one record of every event per step): each record's id is
checked against the layout's at that place, and their number (nothing may follow the last).
A step reads each record's first 8 bytes at once and compares them with the layout's (stats
tag, a one-byte size, the id's tag and bytes); a record that differs (a longer size, say) is
read field by field and checked the same way. An event laid out otherwise is planned again
from the first such event of its kind (a kind may have two or three layouts: a kernel with and
without ``unique_hlo_op_id``), and after ``ROUNDS`` rounds, or where its layout is shared by
fewer than ``MIN_EVENTS`` events (or fewer are left to plan), read in full.

Only the stats asked for are read, at their places in the layout, and each distinct record
once: a record of 16 bytes or less (a ``ref_value`` or an integer stat, a negative one's 10-byte
varint too) is known by its bytes, which the walk has read (the first 8; the next 8 of the
records asked for, one more word each); the events of a kind mostly repeat its first one's.
The values are those ``Events.stats`` reads, field by field (``stat_fields``).
"""
from __future__ import annotations

import numpy as np

from harness.trace.stats import Stats, stat_fields
from harness.trace.varint import MID_TAG, STATS_TAG, blocks, encode, varints, words
from harness.trace.wire import Events

ROUNDS = 3  # layouts learned per kind before its other events are read in full
MAX_PLACES = 32  # a kind with more stats than this is not planned (its events read in full)
MIN_EVENTS = 64  # a layout shared by fewer events is not walked (they are read in full)
WALK = 1 << 14  # events walked at a time: their bytes stay in cache from one record to the next
# a record's first 8 bytes, as a step compares them: stats tag, a one-byte size, the id's tag
_HEAD_MASK, _HEAD = 0xFF | 0x80 << 8 | 0xFF << 16, STATS_TAG | MID_TAG << 16
# the bytes of a record of 2 + size bytes in its first word and in the word after (0: longer
# than two words, not known by its bytes)
_FIRST, _SECOND = (np.asarray([(1 << 8 * min(max(2 + size - skip, 0), 8)) - 1
                               if size <= 14 else 0 for size in range(256)], np.uint64)
                   for skip in (0, 8))
_FIELDS = ("row", "metadata_id", "kind", "value", "number", "at", "size")


def planned_values(ev: Events, ids: list[int | None]) -> tuple[np.ndarray, Stats]:
    """(``codes``, ``values``): for each event of ``ev`` (rows) and each of ``ids``
    (columns; None: an id the plane does not name), the entry of ``values`` that holds the
    event's last stat of that id, as ``Events.stats`` reads it (-1: it has none). Stats of
    the same bytes mostly share an entry."""
    reading = _Reading(ev, [-1 if i is None else i for i in ids])
    pending = np.arange(len(ev))
    for _ in range(ROUNDS):
        if len(pending) < MIN_EVENTS:  # no layout of theirs could be walked
            break
        pending = reading.round(pending)
    reading.in_full(pending)
    return reading.codes, reading.values()


class _Reading:
    """``planned_values`` under way: the codes found so far, and the values they index."""

    def __init__(self, ev: Events, ids: list[int]):
        self.ev, self.ids = ev, ids
        self.codes = np.full((len(ev), len(ids)), -1, np.int64)
        self._values: list[Stats] = []
        self._count = 0
        self.kind, self._kinds = _dense(ev.metadata_id)

    def values(self) -> Stats:
        parts = self._values or [self.ev.stats(np.zeros(0, np.int64), self.ids)]
        return Stats.joined(parts) if len(parts) > 1 else parts[0]

    def _add(self, st: Stats) -> int:
        """Add the entries of ``st`` to the values; returns the code of its first."""
        self._values.append(st)
        self._count += len(st)
        return self._count - len(st)

    def in_full(self, rows: np.ndarray) -> None:
        """The codes of events ``rows``, every stat of theirs read."""
        self.found_in(self.ev.stats(rows, self.ids), rows)

    def found_in(self, st: Stats, rows: np.ndarray) -> None:
        """The codes of events ``rows`` from their stats ``st`` (the others left out)."""
        st = _only(st, keep=np.isin(st.metadata_id, self.ids))
        base = self._add(st)
        for j, stat_id in enumerate(self.ids):
            entry = st.entry(stat_id, len(self.ev))[rows]
            self.codes[rows, j] = np.where(entry >= 0, base + entry, -1)

    def round(self, pending: np.ndarray) -> np.ndarray:
        """Plan the kinds of events ``pending`` from the first of each, read those laid out
        as planned; returns the others."""
        n = len(self.ev)
        first = np.full(self._kinds, n, np.int64)
        np.minimum.at(first, self.kind[pending], pending)
        learned = np.sort(first[first < n])
        every = self.ev.stats(learned)  # the first event of each kind, every stat
        self.found_in(every, learned)
        fresh = np.ones(n, bool)
        fresh[learned] = False
        rest = pending[fresh[pending]]
        # the layouts of the kinds with events left
        learned = learned[np.bincount(self.kind[rest], minlength=self._kinds)[
            self.kind[learned]] > 0]
        layouts = _Layouts(_only(every, learned), learned, self.ids)
        of_kind = np.full(self._kinds, -1, np.int64)
        of_kind[self.kind[learned]] = layouts.layout
        plan = of_kind[self.kind[rest]]
        order = np.argsort(plan.astype(np.int16) if len(layouts.count) < 1 << 15 else plan,
                           kind="stable")  # (a radix sort, for 16 bits)
        bounds = np.searchsorted(plan[order], np.arange(len(layouts.count) + 1))
        walked = (np.diff(bounds) >= MIN_EVENTS) & (layouts.count >= 0)
        ok = np.zeros(len(rest), bool)
        for p in np.flatnonzero(walked).tolist():
            members = order[bounds[p]:bounds[p + 1]]
            for b in blocks(len(members)):  # each block coded apart: its arrays stay in cache
                rows = rest[members[b]]
                good, found = layouts.walk(self.ev, rows, p)
                ok[members[b]] = good
                has = np.flatnonzero(good)
                for j, (payload, stop, key, key2) in found.items():
                    self._coded(rows[has], j, payload[has], stop[has], key[has], key2[has])
        small = ~walked[plan]
        self.in_full(rest[small])
        return rest[~ok & ~small]

    def _coded(self, rows: np.ndarray, j: int, payload: np.ndarray, stop: np.ndarray,
               key: np.ndarray, key2: np.ndarray) -> None:
        """Code column ``j`` of events ``rows`` from their records [payload, stop), known by
        their bytes (``key``, ``key2``: the first 8 and the next 8; ``key`` 0: not known so):
        one record of each kind, and each other distinct record, read."""
        first = np.full(self._kinds, len(rows), np.int64)
        known = np.flatnonzero(key != 0)
        np.minimum.at(first, self.kind[rows[known]], known)
        rep = first[self.kind[rows]]  # the first known record of each one's kind
        same = np.zeros(len(rows), bool)
        has_rep = rep < len(rows)
        same[has_rep] = (key[has_rep] == key[rep[has_rep]]) & (
            key2[has_rep] == key2[rep[has_rep]])
        same &= key != 0
        # distinct records: each kind's first, then those unlike their kind's first
        odd = np.flatnonzero(~same)
        odd_known = odd[key[odd] != 0]
        first_odd, inverse = _distinct(key[odd_known], key2[odd_known])
        read = np.concatenate([first[first < len(rows)], odd_known[first_odd],
                               odd[key[odd] == 0]])
        base = self._add(stat_fields(self.ev.buf, rows[read], payload[read], stop[read]))
        code = np.full(len(rows), -1, np.int64)
        code[read] = base + np.arange(len(read))
        code[same] = code[rep[same]]
        code[odd_known] = code[odd_known[first_odd]][inverse]
        self.codes[rows, j] = code


def _distinct(key: np.ndarray, key2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first of each distinct pair (``key``, ``key2``), each one's index into those), as
    ``np.unique``'s ``return_index`` and ``return_inverse`` give them for single keys."""
    order = np.lexsort((key2, key))  # stable: the first of equal pairs comes first
    k, k2 = key[order], key2[order]
    new = np.ones(len(order), bool)
    new[1:] = (k[1:] != k[:-1]) | (k2[1:] != k2[:-1])
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def _only(st: Stats, rows: np.ndarray | None = None, keep: np.ndarray | None = None
          ) -> Stats:
    """The entries of ``st`` of events ``rows`` (sorted), or those ``keep`` marks."""
    keep = np.isin(st.row, rows, assume_unique=False) if keep is None else keep
    return Stats(*(getattr(st, f)[keep] for f in _FIELDS), st.buf)


class _Layouts:
    """The layouts of some events read in full (``st``, of events ``rows``, sorted): the
    ``layout`` of each, ``table[p]`` the metadata ids of layout ``p``'s stats in order (-1
    past its ``count[p]``), ``wanted[p, j]`` the place of its last stat of the j-th of ``ids``
    (-1: none). Events laid out alike share a layout."""

    def __init__(self, st: Stats, rows: np.ndarray, ids: list[int]):
        local = np.searchsorted(rows, st.row)  # each entry's event, as an index into rows
        count = np.bincount(local, minlength=len(rows))
        places = int(min(count.max(initial=0), MAX_PLACES))
        table = np.full((len(rows), places), -1, np.int64)
        place = np.arange(len(st)) - (np.cumsum(count) - count)[local]
        fits = place < places
        table[local[fits], place[fits]] = st.metadata_id[fits]
        count[count > MAX_PLACES] = -1  # matches no event: read in full
        alike, self.layout = np.unique(np.column_stack([count, table]), axis=0,
                                       return_inverse=True)
        self.layout = self.layout.ravel()
        self.count, self.table = alike[:, 0], alike[:, 1:]
        self.wanted = np.full((len(alike), len(ids)), -1, np.int64)
        for j, stat_id in enumerate(ids if places else []):
            if stat_id < 0:
                continue  # an id the plane does not name
            hit = self.table[:, ::-1] == stat_id
            self.wanted[:, j] = np.where(hit.any(axis=1), places - 1 - np.argmax(hit, axis=1),
                                         -1)

    def walk(self, ev: Events, rows: np.ndarray, p: int
             ) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, ...]]]:
        """(whether each of ``rows``, events of layout ``p``, holds just its stats, in its
        order, and nothing after them; for the j-th id asked for, where the layout has it:
        where that stat's payload begins in each event, where it ends, and its bytes where 16
        or fewer (its first 8, else 0; the next 8)). Records are found as ``Events.stats``
        finds them (a stats field, its size). ``WALK`` events are walked at a time."""
        word = words(ev.buf)
        if not (ev.end[rows] <= len(word)).any():  # the line's last 7 bytes begin no word
            return np.zeros(len(rows), bool), {}
        heads = self._heads(p)
        parts = [self._walk(ev, word, rows[c], p, heads) for c in blocks(len(rows), WALK)]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([ok for ok, _ in parts]), {
            j: tuple(np.concatenate([f[j][i] for _, f in parts]) for i in range(4))
            for j in parts[0][1]}

    def _walk(self, ev: Events, word: np.ndarray, rows: np.ndarray, p: int, heads: list
              ) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, ...]]]:
        """``walk`` of some events, their records compared with ``heads``."""
        buf = ev.buf
        at, end = ev.stats_at[rows].copy(), ev.end[rows]
        ok = end <= len(word)  # the line's last 7 bytes begin no word: read in full
        found: dict[int, tuple[np.ndarray, ...]] = {}
        for s, (mask, head) in enumerate(heads):
            w = word[np.minimum(at, len(word) - 1)]
            fast = (w & mask) == head
            size = w.view(np.uint8)[1::8]  # a one-byte size, where fast
            begin = at + 2
            after = begin + size
            if not fast.all():
                slow = np.flatnonzero(~fast & ok)
                good, begin[slow], after[slow] = _record(buf, at[slow], end[slow],
                                                         self.table[p, s])
                ok[slow[~good]] = False
            for j in np.flatnonzero(self.wanted[p] == s).tolist():
                second = word[np.minimum(at + 8, len(word) - 1)] & _SECOND[size]
                found[j] = begin, after, np.where(fast, w & _FIRST[size], 0), second
            at = after
        return ok & (at == end), found

    def _heads(self, p: int) -> list[tuple[np.uint64, np.uint64]]:
        """(mask, bytes) of the first 8 bytes of each record of layout ``p`` as a step
        compares them (a mask of 0: an id too long to compare, read field by field)."""
        out = []
        for mid in self.table[p, :self.count[p]].tolist():
            code = encode(mid) if mid >= 0 else b"\xff" * 9
            fits = len(code) <= 5
            out.append((np.uint64(_HEAD_MASK | ((1 << 8 * len(code)) - 1) << 24 if fits else 0),
                        np.uint64(_HEAD | int.from_bytes(code, "little") << 24 if fits else 1)))
        return out


def _record(buf: np.ndarray, at: np.ndarray, end: np.ndarray, stat_id: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(whether a stat record with metadata id ``stat_id`` first begins at each ``at``
    before ``end``, where its payload begins, where it ends), read field by field as
    ``Events.stats`` reads it. A record cut short by the line's end is not one."""
    good = (at < end) & (buf[np.minimum(at, len(buf) - 1)] == STATS_TAG)
    payload, after = at + 1, at + 1
    try:
        size, payload[good] = varints(buf, at[good] + 1)
        after[good] = payload[good] + size
        good &= (after <= end) & (payload < after) & (
            buf[np.minimum(payload, len(buf) - 1)] == MID_TAG)
        mid, _ = varints(buf, payload[good] + 1)
    except IndexError:
        return np.zeros(len(at), bool), payload, after
    good[good] = mid == stat_id
    return good, payload, after


def _dense(kinds: np.ndarray) -> tuple[np.ndarray, int]:
    """Each kind as a number from 0 (the metadata id itself where ids are as writers number
    them), and how many numbers there are."""
    if not len(kinds):
        return kinds, 0
    if kinds.min() >= 0 and kinds.max() < 1 << 16:
        return kinds, int(kinds.max()) + 1
    uniq, inverse = np.unique(kinds, return_inverse=True)
    return inverse.ravel(), len(uniq)
