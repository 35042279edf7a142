"""The protobuf wire format, read with numpy: varints at many positions at once, and the wire
tags of an XSpace's event and stat fields (``harness.trace.wire`` reads lines, ``.stats``
their events' stats).

Wire types (protobuf encoding): 0 varint, 1 fixed 8 bytes, 2 length-delimited, 5 fixed 4 bytes.
Damaged bytes raise ``WireError`` (a ``DecodeError``, as protobuf's own parser raises).
"""
from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
# XEvent's fields by wire tag (field number << 3 | wire type); XLine.events has the stats' tag
MID_TAG, OFFSET_TAG, DURATION_TAG, STATS_TAG = 1 << 3, 2 << 3, 3 << 3, 4 << 3 | LEN
EVENTS_TAG = STATS_TAG
# XStat's value (its oneof): the field number names the kind
DOUBLE, UINT64, INT64, STR, BYTES, REF = 2, 3, 4, 5, 6, 7
# events read per numpy pass: their arrays stay in cache (a line of millions of events read
# at once runs 1.5 to 3x slower per event)
BLOCK = 1 << 17


def blocks(n: int, size: int | None = None):
    """Slices of ``range(n)``, ``size`` (default ``BLOCK``) long."""
    size = size or BLOCK
    return [slice(i, min(i + size, n)) for i in range(0, n, size)] or [slice(0, 0)]


class WireError(DecodeError):
    """Bytes that are not a well-formed XLine."""


def varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position ``at`` of ``buf`` (uint8): (values as int64, the
    position after each). Each read from the 8 bytes at its position at once (``words``: one
    gather, then bit operations on whole arrays: a trace's times take 5 to 7 bytes, and a pass
    per byte cost a gather and a scatter each); one longer than 8 bytes, or too near the end
    of ``buf`` for 8, a byte at a time (``_bytewise``)."""
    at = np.asarray(at)
    word = words(buf)
    if not len(at) or not len(word):
        value, after = _bytewise(buf, at)
        return value.view(np.int64), after
    inside = None if at.min() >= 0 and at.max() < len(word) else (at >= 0) & (at < len(word))
    x = word[at if inside is None else np.where(inside, at, 0)]
    stop = ~x
    stop &= _HIGH  # the high bits clear: a varint's last byte has one
    mask = ~stop
    mask += _ONE
    mask &= stop  # the lowest of them: the varint's last byte's
    mask <<= _ONE
    mask -= _ONE  # its bytes (all 8 where it has more: read below)
    x &= mask
    for keep, shift, high in _PACK:  # the 7-bit groups packed in pairs: 14, 28, 56 bits
        moved = x >> shift
        moved &= high
        x &= keep
        x |= moved
    after = at + (np.bitwise_count(mask) >> 3)
    slow = stop == 0
    if inside is not None:
        slow |= ~inside
    slow = np.flatnonzero(slow)
    if len(slow):
        x[slow], after[slow] = _bytewise(buf, at[slow])
    return x.view(np.int64), after


_HIGH = np.uint64(0x8080808080808080)
_ONE = np.uint64(1)
# per pass: the low group of each lane, the shift that brings its high group down beside it
# (the high bits between them dropped) and where that group lands
_PACK = tuple((np.uint64(keep), np.uint64(shift), np.uint64(keep << bits))
              for keep, shift, bits in ((0x007F007F007F007F, 1, 7),
                                        (0x00003FFF00003FFF, 2, 14),
                                        (0x000000000FFFFFFF, 4, 28)))


def _bytewise(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``varints`` read one byte of every varint per step (any length; damaged: ``WireError``,
    or ``IndexError`` past the end of ``buf``)."""
    byte = buf[at]
    after = at + 1
    more = np.flatnonzero(byte >= 0x80)
    if not len(more):
        return byte.astype(np.uint64), after
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
    return value, after


def tag_is(buf: np.ndarray, at: np.ndarray, end: np.ndarray, tag: int) -> np.ndarray:
    """Whether a field with wire tag ``tag`` (one byte) starts at each ``at`` before ``end``."""
    return (at < end) & (buf[np.minimum(at, len(buf) - 1)] == tag)


def words(buf: np.ndarray) -> np.ndarray:
    """The 8 bytes from each position of ``buf`` (uint8) as one little-endian uint64: a view,
    not a copy (``words(buf)[i]`` is ``buf[i:i + 8]``; the last 7 positions have none). One
    gather of it reads a record's first bytes at many positions at once."""
    if len(buf) < 8:
        return np.zeros(0, np.uint64)
    return np.ndarray((len(buf) - 7,), "<u8", buffer=buf, offset=0, strides=(1,))


def varint(raw, pos: int) -> tuple[int, int]:
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


def encode(n: int) -> bytes:
    """``n`` as a protobuf varint: seven bits a byte, low first, the high bit set on all but
    the last (what ``varint`` reads back; benchmarks and tests write XSpace pieces with it)."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
