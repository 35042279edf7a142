"""Lookups over an XSpace shared by the trace layouts: planes, lines, steps.

Lines stay raw bytes until asked for (``PlaneIndex.lines``); ``StepWindows`` turns step
annotations into time windows; ``host_steps`` reads the host's step annotations and the run_id
of each program execution inside them.
"""
from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from harness.trace.xplane import (
    TAG_DURATION_PS,
    TAG_METADATA_ID,
    TAG_OFFSET_PS,
    XLine,
    XLineHeader,
    XLineVarints,
    XSpace,
)

HOST_PLANE = "/host:CPU"
STEP_NUM = "step_num"
EXECUTE_PREFIX = "CommonPjRtLoadedExecutable::Execute"
XLA_THREAD_PREFIX = "tf_"  # XLA's thread-pool lines on the host plane


@dataclass
class Columns:
    """Column lists of the EVENTS table, filled by a layout.

    ``program`` and ``op`` hold names, or integer codes that ``program_names`` / ``op_names``
    translate (cheaper to collect in a hot loop than strings).
    """

    program: list = field(default_factory=list)
    op: list = field(default_factory=list)
    device: array = field(default_factory=lambda: array("q"))
    step: array = field(default_factory=lambda: array("q"))
    start_ns: array = field(default_factory=lambda: array("q"))
    duration_ns: array = field(default_factory=lambda: array("q"))
    runs: array = field(default_factory=lambda: array("q"))  # CPU: run_id of each execution
    # the program id of each execution (TPU: the metadata's program_id stat), as a string;
    # empty when the layout names none (EVENTS then has no program_id column)
    program_id: list = field(default_factory=list)
    program_names: dict = field(default_factory=dict)
    op_names: dict = field(default_factory=dict)
    # each execution's program id (the trace's ``program_id`` stat; "" where it gives none),
    # and whether steps come from step markers (False: each execution is numbered later)
    program_id: list = field(default_factory=list)
    stepped: bool = True
    # GPU: {async-start name in the HLO text: the wrapped op's name, which the trace shows}
    async_names: dict = field(default_factory=dict)

    def add(self, program: str, op: str, device: int, step: int, start_ns: int, dur_ns: int,
            program_id: str = ""):
        self.program.append(program)
        self.program_id.append(program_id)
        self.op.append(op)
        self.device.append(device)
        self.step.append(step)
        self.start_ns.append(start_ns)
        self.duration_ns.append(dur_ns)


class PlaneIndex:
    """One plane's lookups (event names, stat ids, stat values) and its lines, decoded lazily."""

    def __init__(self, plane):
        self.plane = plane
        self.event_names = {k: m.name for k, m in plane.event_metadata.items()}
        self.stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        self.stat_ids = {m.name: k for k, m in plane.stat_metadata.items()}
        self._names = [XLineHeader.FromString(raw).name for raw in plane.lines]

    @property
    def line_names(self) -> list[str]:
        return self._names

    def lines(self, want: Callable[[str], bool] = lambda name: True):
        """Decoded lines whose name ``want`` accepts, one at a time."""
        for name, raw in zip(self._names, self.plane.lines):
            if want(name):
                yield XLine.FromString(raw)

    def value(self, stat):
        """A stat's value; ``ref_value`` stats resolve to the referenced stat-metadata name."""
        kind = stat.WhichOneof("value")
        if kind == "ref_value":
            return self.stat_names.get(stat.ref_value, "")
        return getattr(stat, kind) if kind else None

    def stats(self, stats: Iterable) -> dict:
        return {self.stat_names.get(s.metadata_id, ""): self.value(s) for s in stats}

    def line(self, name: str):
        return next(self.lines(lambda n: n == name), None)

    def raw_line(self, name: str) -> bytes | None:
        """The undecoded bytes of the first line called ``name``."""
        return next((raw for n, raw in zip(self._names, self.plane.lines) if n == name), None)


class StepWindows:
    """Measured steps as time windows [start, end] in ns, sorted by start."""

    def __init__(self, windows: Iterable[tuple[int, int, int]], open_ended: bool = False):
        items = sorted(windows)
        self.starts = [w[0] for w in items]
        self.ends = [w[1] for w in items]
        self.steps = [w[2] for w in items]
        # Open-ended: a step lasts until the next one starts (device work trails the host).
        self.open_ended = open_ended

    def __bool__(self) -> bool:
        return bool(self.starts)

    def step_at(self, t_ns: int) -> int:
        i = bisect.bisect_right(self.starts, t_ns) - 1
        if i < 0:
            return -1
        if self.open_ended or t_ns <= self.ends[i]:
            return self.steps[i]
        return -1


    def assign(self, t_ns: np.ndarray) -> np.ndarray:
        """``step_at`` for an array of times (vectorized; -1 outside every step)."""
        t = np.asarray(t_ns, dtype=np.int64)
        if not self.starts:
            return np.full(len(t), -1, dtype=np.int64)
        i = np.searchsorted(np.asarray(self.starts, dtype=np.int64), t, side="right") - 1
        j = np.clip(i, 0, None)
        inside = i >= 0
        if not self.open_ended:
            inside &= t <= np.asarray(self.ends, dtype=np.int64)[j]
        return np.where(inside, np.asarray(self.steps, dtype=np.int64)[j], -1)


def line_arrays(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A line's events (``raw``: its bytes) as arrays: metadata ids, start and duration (ns).

    Events without stats are decoded in one pass in C (``varint_events``); otherwise the line
    is decoded and read field by field (``_field_arrays``).
    """
    fast = varint_events(raw)
    return fast if fast is not None else _field_arrays(XLine.FromString(raw))


def _field_arrays(line) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    evs = line.events
    n = len(evs)
    mids = np.fromiter((e.metadata_id for e in evs), np.int64, n)
    offsets = np.fromiter((e.offset_ps for e in evs), np.int64, n)
    durations = np.fromiter((e.duration_ps for e in evs), np.int64, n)
    return mids, (line.timestamp_ns * 1000 + offsets) // 1000, durations // 1000


def varint_events(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Decode a line whose events hold only varint fields, or None when it holds anything else.

    Read as packed varints, the events field is a run of (tag, value) pairs; proto3 writes an
    event's fields in field order (tags 8, 16, 24 rising) and leaves out zero metadata ids and
    durations, so a new event starts wherever the tag does not rise. Every event must carry
    its offset (tag 16), as XPlane writers always set it; otherwise None.
    """
    try:
        msg = XLineVarints.FromString(raw)
    except DecodeError:
        return None
    flat = np.array(msg.events, dtype=np.uint64)
    if len(flat) % 2:
        return None
    tags, values = flat[0::2], flat[1::2].view(np.int64)
    if not np.isin(tags, (TAG_METADATA_ID, TAG_OFFSET_PS, TAG_DURATION_PS)).all():
        return None  # stats, aggregated events or unknown fields: not this fast path
    first = np.ones(len(tags), dtype=bool)
    first[1:] = tags[1:] <= tags[:-1]
    event = np.cumsum(first) - 1
    n = int(event[-1]) + 1 if len(event) else 0
    # XPlane writers give every event an offset; one without would blur a boundary
    if n and not (np.bincount(event[tags == TAG_OFFSET_PS], minlength=n) == 1).all():
        return None
    columns = {}
    for tag in (TAG_METADATA_ID, TAG_OFFSET_PS, TAG_DURATION_PS):
        col = np.zeros(n, dtype=np.int64)
        mask = tags == tag
        col[event[mask]] = values[mask]
        columns[tag] = col
    start = (msg.timestamp_ns * 1000 + columns[TAG_OFFSET_PS]) // 1000
    return columns[TAG_METADATA_ID], start, columns[TAG_DURATION_PS] // 1000


def names_of(codes: np.ndarray, names: dict, transform=lambda name: name) -> list:
    """``names[code]`` for every code, looked up (and transformed) once per distinct code."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    table = np.asarray([transform(names.get(int(c), "")) for c in uniq] or [""], dtype=object)
    return table[inverse].tolist() if len(codes) else []


def line_events(line):
    """(event, start_ns, duration_ns) of a line; XEvent offsets are ps after line.timestamp_ns."""
    base_ps = line.timestamp_ns * 1000
    for ev in line.events:
        yield ev, (base_ps + ev.offset_ps) // 1000, ev.duration_ps // 1000


def plane(space: XSpace, name: str):
    return next((p for p in space.planes if p.name == name), None)


def host_steps(space: XSpace, idx: PlaneIndex | None = None) -> tuple[StepWindows, dict]:
    """Step annotations on the host plane, and run_id -> step of each ``Execute`` event.

    Annotations and ``Execute`` events are made by the Python thread, so XLA's own thread-pool
    lines (``tf_*``), which hold the op executions, are not searched.
    """
    host = plane(space, HOST_PLANE)
    if host is None:
        return StepWindows([]), {}
    idx = idx or PlaneIndex(host)
    step_id, run_id = idx.stat_ids.get(STEP_NUM), idx.stat_ids.get("run_id")
    execute_ids = {k for k, n in idx.event_names.items() if n.startswith(EXECUTE_PREFIX)}
    windows, executes = [], []
    for line in idx.lines(lambda name: not name.startswith(XLA_THREAD_PREFIX)):
        for ev, start, dur in line_events(line):
            for st in ev.stats:
                if st.metadata_id == step_id:
                    windows.append((start, start + dur, int(idx.value(st))))
                elif st.metadata_id == run_id and ev.metadata_id in execute_ids:
                    executes.append((start, int(idx.value(st))))
    steps = StepWindows(windows)
    # Every run an Execute event names gets an entry: -1 when it ran outside the steps.
    run_step: dict[int, int] = {}
    for start, rid in executes:
        s = steps.step_at(start)
        if run_step.get(rid, -1) < 0:
            run_step[rid] = s
    return steps, run_step


def device_planes(space: XSpace, pattern: re.Pattern) -> list[tuple[int, object]]:
    """(device number, plane) of every plane whose name ``pattern`` matches (group 1: n)."""
    return [(int(m.group(1)), p) for p in space.planes if (m := pattern.match(p.name))]


def device_step_windows(idx: PlaneIndex) -> StepWindows:
    """Steps from a device plane's ``Steps`` line: step_num stat, else a numeric name, else
    order."""
    line = idx.line("Steps")
    if line is None:
        return StepWindows([])
    windows = []
    for i, (ev, start, dur) in enumerate(line_events(line)):
        stats = idx.stats(ev.stats)
        name = idx.event_names.get(ev.metadata_id, "")
        step = stats.get(STEP_NUM, int(name) if name.isdigit() else i)
        windows.append((start, start + dur, int(step)))
    return StepWindows(windows)
