"""An XSpace read a piece at a time: each plane's metadata parsed by protobuf, its lines located
and read only when a format asks for them, so a trace is never held whole, let alone twice.

``Space`` scans the file's top-level records (planes, and in each plane its lines and metadata)
without reading the lines' events; a plane's metadata (ids, names, event and stat metadata,
plane stats) is parsed by protobuf's C parser as an ``XPlane`` without lines. ``Space.planes``,
``Plane.name``, ``Plane.event_metadata``, ``Plane.stat_metadata`` and ``Plane.stats`` read as
the protobuf message's do; ``Plane.lines`` holds ``LineRef``s (a line's name, read from its
first bytes, and ``raw()``, its bytes, read on demand). Damaged bytes raise ``WireError``.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from harness.trace.wire import FIXED32, FIXED64, LEN, VARINT, WireError
from harness.trace.xplane import XPlaneLazy

# XSpace and XPlane field numbers (xplane.proto)
SPACE_PLANES, SPACE_ERRORS, SPACE_WARNINGS, SPACE_HOSTNAMES = 1, 2, 3, 4
PLANE_LINES = 3
LINE_NAME, LINE_EVENTS = 2, 4
_WINDOW = 1 << 16  # bytes read at a time while scanning records
_TAIL = 256 << 20  # a plane's metadata larger than this is scanned record by record
_HEADER = 256      # bytes of a line read at a time for its name


class Source:
    """The bytes of a trace: a file, read by range (``os.pread``), or a buffer in memory."""

    def __init__(self, data: bytes | bytearray | memoryview | None = None,
                 path: str | os.PathLike | None = None):
        if path is not None:
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            weakref.finalize(self, os.close, self._fd)
            self.size = os.fstat(self._fd).st_size
            self._data = None
        else:
            self._fd, self._data = None, memoryview(data).cast("B")
            self.size = len(self._data)

    def read(self, start: int, size: int) -> bytes | memoryview:
        """``size`` bytes from ``start`` (fewer at the end of the trace)."""
        if self._data is not None:
            return self._data[start:start + size]
        return os.pread(self._fd, size, start)


class _Scanner:
    """Reads protobuf records (tag, then a value) of ``source`` from ``start`` to ``end``,
    through a window of ``_WINDOW`` bytes."""

    def __init__(self, source: Source, start: int, end: int, window: int = _WINDOW):
        self.source, self.pos, self.end, self.window = source, start, end, window
        self._base, self._buf = start, b""

    def _byte(self, pos: int) -> int:
        if not self._base <= pos < self._base + len(self._buf):
            self._base = pos
            self._buf = bytes(self.source.read(pos, min(self.window, self.end - pos)))
            if not self._buf:
                raise WireError("a record is cut short")
        return self._buf[pos - self._base]

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= self.end or shift > 63:
                raise WireError("a varint is cut short or longer than 10 bytes")
            byte = self._byte(self.pos)
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def records(self):
        """(field number, wire type, where the record starts, its payload's start and end;
        for a varint, its value is the payload's end's stand-in: None)."""
        while self.pos < self.end:
            begin = self.pos
            tag = self.varint()
            number, wire = tag >> 3, tag & 7
            if number == 0:
                raise WireError("a record with field number 0")
            if wire == VARINT:
                self.varint()
                yield number, wire, begin, begin, self.pos
                continue
            if wire == LEN:
                size = self.varint()
                at = self.pos
            elif wire in (FIXED64, FIXED32):
                size, at = (8 if wire == FIXED64 else 4), self.pos
            else:
                raise WireError(f"a record of wire type {wire}, which XSpace does not use")
            self.pos = at + size
            if self.pos > self.end:
                raise WireError("a record runs past the end of its message")
            yield number, wire, begin, at, self.pos


@dataclass
class LineRef:
    """One line of a plane, not read yet: its ``name`` and ``raw()`` bytes."""

    source: Source
    start: int
    size: int
    _name: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = self._read_name()
        return self._name

    def _read_name(self) -> str:
        scan = _Scanner(self.source, self.start, self.start + self.size, _HEADER)
        for number, _, _, at, stop in scan.records():
            if number == LINE_NAME:
                return bytes(self.source.read(at, stop - at)).decode("utf-8", "replace")
            if number == LINE_EVENTS:  # writers put the name before the events
                break
        return ""

    def raw(self) -> bytes | memoryview:
        return self.source.read(self.start, self.size)


class Plane:
    """One plane: the metadata of an ``XPlane`` (``id``, ``name``, ``event_metadata``,
    ``stat_metadata``, ``stats``), its ``lines``, each a ``LineRef``, and its metadata's names
    by id (``event_names``, ``stat_names``; a CPU trace has tens of thousands of stat names:
    read once) and its stat ids by name (``stat_ids``)."""

    def __init__(self, meta, lines: list[LineRef]):
        self._meta, self.lines = meta, lines
        self._names: dict = {}

    def __getattr__(self, name):
        return getattr(self._meta, name)

    def _by_id(self, field: str) -> dict[int, str]:
        if field not in self._names:
            self._names[field] = {k: m.name for k, m in getattr(self._meta, field).items()}
        return self._names[field]

    @property
    def event_names(self) -> dict[int, str]:
        return self._by_id("event_metadata")

    @property
    def stat_names(self) -> dict[int, str]:
        return self._by_id("stat_metadata")

    @property
    def stat_ids(self) -> dict[str, int]:
        if "ids" not in self._names:
            self._names["ids"] = {name: k for k, name in self.stat_names.items()}
        return self._names["ids"]


class Space:
    """An XSpace (``planes``, ``hostnames``, ``errors``, ``warnings``) over a ``Source``."""

    def __init__(self, source: Source):
        self.source = source
        self.planes: list[Plane] = []
        self.hostnames: list[str] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        texts = {SPACE_ERRORS: self.errors, SPACE_WARNINGS: self.warnings,
                 SPACE_HOSTNAMES: self.hostnames}
        for number, wire, _, at, stop in _Scanner(source, 0, source.size).records():
            if number == SPACE_PLANES and wire == LEN:
                self.planes.append(_plane(source, at, stop))
            elif number in texts and wire == LEN:
                texts[number].append(bytes(source.read(at, stop - at)).decode("utf-8",
                                                                               "replace"))

    @classmethod
    def from_bytes(cls, data) -> Space:
        return cls(Source(data))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Space:
        return cls(Source(path=Path(path)))


def _plane(source: Source, start: int, end: int) -> Plane:
    """Scan one plane record: its lines located, its other records parsed (as an XPlane whose
    lines stay bytes: it has none).

    Writers put the lines (field 3) before the metadata (4, 5) and stats (6): from the first
    of those on, the rest of the plane is parsed in one C call, its lines (if it holds any
    after all) left unparsed and scanned again record by record."""
    lines, rest, run = [], [], None  # run: the current stretch of non-line records
    tail, tried = None, False
    for number, wire, begin, at, stop in _Scanner(source, start, end).records():
        if number == PLANE_LINES and wire == LEN:
            lines.append(LineRef(source, at, stop - at))
            if run:
                rest.append(run)
                run = None
            continue
        if number > PLANE_LINES and not tried and end - begin <= _TAIL:
            tried, tail = True, XPlaneLazy.FromString(bytes(source.read(begin, end - begin)))
            if not tail.lines:
                break
            tail = None
        if run is not None and run[1] == begin:
            run = (run[0], stop)
        else:
            if run:
                rest.append(run)
            run = (begin, stop)
    if run:
        rest.append(run)
    meta = XPlaneLazy.FromString(b"".join(bytes(source.read(a, b - a)) for a, b in rest))
    if tail is not None:
        meta.MergeFrom(tail)
    return Plane(meta, lines)
