"""Lookups over an XSpace shared by the trace formats: planes, lines, steps.

Lines stay on disk until asked for (``PlaneIndex.lines``), then are read as columns
(``harness.trace.wire``); ``StepWindows`` turns step annotations into time windows;
``host_steps`` reads the host's step annotations and the run_id of each program execution
inside them.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from harness.trace.space import Space
from harness.trace.wire import BYTES, DOUBLE, INT64, REF, STR, UINT64, Line, Stats, read_line

HOST_PLANE = "/host:CPU"
STEP_NUM = "step_num"
EXECUTE_PREFIX = "CommonPjRtLoadedExecutable::Execute"
XLA_THREAD_PREFIX = "tf_"  # XLA's thread-pool lines on the host plane


@dataclass
class Columns:
    """Columns of the EVENTS table, filled by a format's reader (lists or numpy arrays).

    ``program``, ``program_id`` and ``op`` hold names, or integer codes that
    ``program_names`` / ``program_id_names`` / ``op_names`` translate (cheaper to collect than
    strings). ``program_id``: each execution's program id (the trace's ``program_id`` stat; ""
    where it gives none; empty: the format names none). ``stepped``: whether steps come from
    step markers (False: each execution is numbered later).
    """

    program: list = field(default_factory=list)
    op: list = field(default_factory=list)
    device: list = field(default_factory=list)
    step: list = field(default_factory=list)
    start_ns: list = field(default_factory=list)
    duration_ns: list = field(default_factory=list)
    program_id: list = field(default_factory=list)
    program_names: dict = field(default_factory=dict)
    program_id_names: dict = field(default_factory=dict)
    op_names: dict = field(default_factory=dict)
    stepped: bool = True
    # GPU: {async-start name in the HLO text: the wrapped op's name, which the trace shows}
    async_names: dict = field(default_factory=dict)


class PlaneIndex:
    """One plane's lookups (event names, stat ids, stat values) and its lines, read lazily."""

    def __init__(self, plane):
        self.plane = plane
        self.event_names, self.stat_names = plane.event_names, plane.stat_names
        self.stat_ids = plane.stat_ids
        self._refs = list(plane.lines)

    @property
    def line_names(self) -> list[str]:
        return [ref.name for ref in self._refs]

    def lines(self, want: Callable[[str], bool] = lambda name: True) -> Iterable[Line]:
        """The lines whose name ``want`` accepts, one at a time, each read as ``wire.Line``."""
        for ref in self._refs:
            if want(ref.name):
                yield read_line(ref.raw())

    def refs(self, want: Callable[[str], bool] = lambda name: True) -> list:
        """The lines whose name ``want`` accepts, unread (``space.LineRef``)."""
        return [ref for ref in self._refs if want(ref.name)]

    def value(self, stat):
        """A protobuf stat's value; ``ref_value`` stats resolve to the referenced stat-metadata
        name."""
        kind = stat.WhichOneof("value")
        if kind == "ref_value":
            return self.stat_names.get(stat.ref_value, "")
        return getattr(stat, kind) if kind else None

    def stats(self, stats: Iterable) -> dict:
        """A protobuf message's stats by name (event metadata, plane)."""
        return {self.stat_names.get(s.metadata_id, ""): self.value(s) for s in stats}

    def entry_value(self, stats: Stats, i: int):
        """Entry ``i`` of a line's ``Stats`` as ``value`` gives a protobuf stat's."""
        kind = int(stats.kind[i])
        if kind == REF:
            return self.stat_names.get(int(stats.value[i]), "")
        if kind in (STR, BYTES):
            return stats.text(i)
        if kind == DOUBLE:
            return float(stats.number[i])
        if kind == UINT64:
            return int(stats.value[i]) % 2**64
        return int(stats.value[i]) if kind else None

    def entry_texts(self, stats: Stats, entry: np.ndarray) -> list[str]:
        """``str()`` of each entry's value (``entry_value``; "" for -1), each distinct value
        printed once."""
        seen: dict = {}
        out = []
        for e in entry.tolist():
            if e < 0:
                out.append("")
                continue
            kind = int(stats.kind[e])
            key = (kind, int(stats.value[e])) if kind in (REF, UINT64, INT64) else None
            if key is None or key not in seen:
                text = str(self.entry_value(stats, e))
                if key is None:
                    out.append(text)
                    continue
                seen[key] = text
            out.append(seen[key])
        return out

    def entry_stats(self, stats: Stats, row: int) -> dict:
        """The stats of event ``row`` by name, as ``stats`` gives a protobuf message's."""
        lo, hi = np.searchsorted(stats.row, [row, row + 1])
        return {self.stat_names.get(int(stats.metadata_id[i]), ""): self.entry_value(stats, i)
                for i in range(lo, hi)}

    def line(self, name: str) -> Line | None:
        return next(self.lines(lambda n: n == name), None)


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


def trace_bytes(space: Space) -> int:
    """The bytes of all the lines of a trace (what reading them in parallel shares out)."""
    return sum(ref.size for p in space.planes for ref in p.lines)


def plane(space: Space, name: str):
    return next((p for p in space.planes if p.name == name), None)


def host_steps(space: Space, idx: PlaneIndex | None = None) -> tuple[StepWindows, dict]:
    """Step annotations on the host plane, and run_id -> step of each ``Execute`` event.

    Annotations and ``Execute`` events are made by the Python thread, so XLA's own thread-pool
    lines (``tf_*``), which hold the op executions, are not searched. Of the others, only the
    ``Execute`` events (known by name) and the events whose bytes may hold a ``step_num``
    stat (``Line.holding``: a superset of those that do) are read.
    """
    host = plane(space, HOST_PLANE)
    if host is None:
        return StepWindows([]), {}
    idx = idx or PlaneIndex(host)
    step_id, run_id = idx.stat_ids.get(STEP_NUM), idx.stat_ids.get("run_id")
    wanted = [k for k in (step_id, run_id) if k is not None]
    execute_ids = [k for k, n in idx.event_names.items() if n.startswith(EXECUTE_PREFIX)]
    windows, executes = [], []
    for line in idx.lines(lambda name: not name.startswith(XLA_THREAD_PREFIX)):
        # the events that can matter: Execute events, and those whose bytes may hold a step
        rows = np.flatnonzero(np.isin(line.metadata_id, execute_ids))
        if step_id is not None:
            rows = np.union1d(rows, line.holding(step_id))
        ev = line.events(rows)
        st = ev.stats(ids=wanted)
        start, end = ev.start_ns, ev.start_ns + ev.duration_ns
        execute = np.isin(ev.metadata_id, execute_ids)
        for i, (row, mid) in enumerate(zip(st.row.tolist(), st.metadata_id.tolist())):
            if mid == step_id:
                windows.append((int(start[row]), int(end[row]), int(idx.entry_value(st, i))))
            elif mid == run_id and execute[row]:
                executes.append((int(start[row]), int(idx.entry_value(st, i))))
    steps = StepWindows(windows)
    # Every run an Execute event names gets an entry: -1 when it ran outside the steps.
    run_step: dict[int, int] = {}
    for start, rid in executes:
        s = steps.step_at(start)
        if run_step.get(rid, -1) < 0:
            run_step[rid] = s
    return steps, run_step


def device_planes(space: Space, pattern: re.Pattern) -> list[tuple[int, object]]:
    """(device number, plane) of every plane whose name ``pattern`` matches (group 1: n)."""
    return [(int(m.group(1)), p) for p in space.planes if (m := pattern.match(p.name))]


def device_work(space: Space, pattern: re.Pattern) -> tuple:
    """The context, parts and size of a device-plane format's decode (``harness.trace.parallel``):
    (the trace, its device planes whose name ``pattern`` matches); the host's annotations (part
    None) and each device plane; the trace's bytes."""
    planes = device_planes(space, pattern)
    return (space, planes), [None, *range(len(planes))], trace_bytes(space)


def device_step_windows(idx: PlaneIndex) -> StepWindows:
    """Steps from a device plane's ``Steps`` line: step_num stat, else a numeric name, else
    order."""
    line = idx.line("Steps")
    if line is None:
        return StepWindows([])
    ev = line.events()
    st = ev.stats()
    windows = []
    for i, (mid, start, dur) in enumerate(zip(ev.metadata_id.tolist(), ev.start_ns.tolist(),
                                              ev.duration_ns.tolist())):
        stats = idx.entry_stats(st, i)
        name = idx.event_names.get(mid, "")
        step = stats.get(STEP_NUM, int(name) if name.isdigit() else i)
        windows.append((start, start + dur, int(step)))
    return StepWindows(windows)
