"""Where XLA op executions live in an XSpace, one entry per backend layout (`profiling.md`).

Each layout turns an XSpace into plain column lists (``Columns``); ``harness.trace`` makes the
DataFrame. Steps are attributed here: ``-1`` marks an execution outside every measured step.

- CPU: plane ``/host:CPU``; op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal``,
  ``run_id``. Dispatch is asynchronous, so ops are tied to steps through ``run_id``: the host-side
  ``CommonPjRtLoadedExecutable::Execute`` event inside each step annotation carries it.
- TPU: planes ``/device:TPU:<n>``, line ``XLA Ops`` (event name = HLO op), modules from the
  ``XLA Modules`` line, steps from the ``Steps`` line.
- GPU: planes ``/device:GPU:<n>``, kernel events on per-stream lines with ``hlo_op`` /
  ``hlo_module`` stats; consecutive kernels of one HLO op fold into one execution whose duration
  is the sum of its kernels'. Steps come from a ``Steps`` line or the host step annotations.
"""
from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.xplane import XLine, XLineHeader, XSpace

HOST_PLANE = "/host:CPU"
STEP_NUM = "step_num"
EXECUTE_PREFIX = "CommonPjRtLoadedExecutable::Execute"
_XLA_THREAD_PREFIX = "tf_"
_TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_MODULE_SUFFIX = re.compile(r"\(\d+\)$")  # "jit_step(12)" -> "jit_step"
_GPU_NON_KERNEL_LINES = {"XLA Modules", "XLA Ops", "Steps", "Launch Stats", "Framework Name Scope",
                         "Framework Ops", "Source code", "TensorFlow Name Scope"}


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
    program_names: dict = field(default_factory=dict)
    op_names: dict = field(default_factory=dict)

    def add(self, program: str, op: str, device: int, step: int, start_ns: int, dur_ns: int):
        self.program.append(program)
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


def _line_events(line):
    """(event, start_ns, duration_ns) of a line; XEvent offsets are ps after line.timestamp_ns."""
    base_ps = line.timestamp_ns * 1000
    for ev in line.events:
        yield ev, (base_ps + ev.offset_ps) // 1000, ev.duration_ps // 1000


def _plane(space: XSpace, name: str):
    return next((p for p in space.planes if p.name == name), None)


def _host_steps(space: XSpace, idx: PlaneIndex | None = None) -> tuple[StepWindows, dict]:
    """Step annotations on the host plane, and run_id -> step of each ``Execute`` event.

    Annotations and ``Execute`` events are made by the Python thread, so XLA's own thread-pool
    lines (``tf_*``), which hold the op executions, are not searched.
    """
    host = _plane(space, HOST_PLANE)
    if host is None:
        return StepWindows([]), {}
    idx = idx or PlaneIndex(host)
    step_id, run_id = idx.stat_ids.get(STEP_NUM), idx.stat_ids.get("run_id")
    execute_ids = {k for k, n in idx.event_names.items() if n.startswith(EXECUTE_PREFIX)}
    windows, executes = [], []
    for line in idx.lines(lambda name: not name.startswith(_XLA_THREAD_PREFIX)):
        for ev, start, dur in _line_events(line):
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


# --- CPU ----------------------------------------------------------------------------------
def _cpu_detect(space: XSpace) -> bool:
    host = _plane(space, HOST_PLANE)
    return host is not None and any(m.name == "hlo_op" for m in host.stat_metadata.values())


_UNSEEN = object()


def _stat_positions(ev, ids: tuple, idx: PlaneIndex, cols: Columns) -> tuple | None:
    """Where an op event keeps its device and run stats, or None if it is not an op.

    XLA writes an op's stats in the same order on every execution, so positions learned from
    the first event of a kind let later events read two stats instead of all of them (each read
    is checked). The op's name is its ``hlo_op`` stat, recorded once per event kind.
    """
    op_id, _, dev_id, run_id = ids
    stats = list(ev.stats)
    where = {st.metadata_id: i for i, st in enumerate(stats)}
    if op_id not in where:
        return None
    cols.op_names[ev.metadata_id] = idx.value(stats[where[op_id]])
    return where.get(dev_id, -1), where.get(run_id, -1)


def _cpu_line(line, ids: tuple, idx: PlaneIndex, plans: dict, run_program: dict,
              cols: Columns) -> None:
    """Op executions of one XLA thread-pool line. The hot loop: locals and bound appends only.

    A run_id is one execution of one program, so the program is read once per run.
    """
    _, mod_id, dev_id, run_id = ids
    programs, ops, devices, starts, durs, runs = (cols.program.append, cols.op.append,
                                                  cols.device.append, cols.start_ns.append,
                                                  cols.duration_ns.append, cols.runs.append)
    base_ps = line.timestamp_ns * 1000
    for ev in line.events:
        mid = ev.metadata_id
        plan = plans.get(mid, _UNSEEN)
        if plan is None:
            continue
        if plan is _UNSEEN:
            plan = plans[mid] = _stat_positions(ev, ids, idx, cols)
            if plan is None:
                continue
        stats = ev.stats
        try:
            s_dev, s_run = stats[plan[0]], stats[plan[1]]
            if s_dev.metadata_id != dev_id or s_run.metadata_id != run_id:
                raise IndexError
            device = s_dev.int64_value or s_dev.uint64_value
            run = s_run.int64_value or s_run.uint64_value
        except IndexError:  # this event lays its stats out differently: read them all
            by_id = {st.metadata_id: idx.value(st) for st in stats}
            device, run = by_id.get(dev_id, -1), by_id.get(run_id, -1)
        program = run_program.get(run)
        if program is None:
            program = run_program[run] = next(
                (idx.value(st) for st in stats if st.metadata_id == mod_id), "")
        programs(program)
        ops(mid)  # named through cols.op_names
        devices(device)
        starts((base_ps + ev.offset_ps) // 1000)
        durs(ev.duration_ps // 1000)
        runs(run)


def _cpu_extract(space: XSpace) -> Columns:
    host = _plane(space, HOST_PLANE)
    idx = PlaneIndex(host)
    ids = tuple(idx.stat_ids.get(n) for n in ("hlo_op", "hlo_module", "device_ordinal", "run_id"))
    steps, run_step = _host_steps(space, idx)
    plans: dict = {}  # event metadata id -> stat positions, or None when not an op
    run_program: dict = {}
    cols = Columns()
    for line in idx.lines(lambda name: name.startswith(_XLA_THREAD_PREFIX)):
        _cpu_line(line, ids, idx, plans, run_program, cols)  # ops run on XLA's pool lines
    if not steps:  # no annotations: each execution of a program is its own step
        order = {r: i for i, r in enumerate(sorted(set(cols.runs)))}
        cols.step = array("q", [order[r] for r in cols.runs])
    else:
        _steps_by_first_op(cols, steps, run_step)
        cols.step = array("q", [run_step.get(r, -1) for r in cols.runs])
    return cols


def _steps_by_first_op(cols: Columns, steps: StepWindows, run_step: dict) -> None:
    """Tie runs no ``Execute`` event names (single-device dispatch carries no run_id) to the
    step whose annotation last opened before the run's first op; runs before any step stay out.
    """
    first: dict[int, int] = {}
    for run, start in zip(cols.runs, cols.start_ns):
        if run not in run_step and start < first.get(run, start + 1):
            first[run] = start
    if not first:
        return
    opened = StepWindows(zip(steps.starts, steps.ends, steps.steps), open_ended=True)
    for run, start in first.items():
        run_step[run] = opened.step_at(start)


# --- TPU ----------------------------------------------------------------------------------
def _device_planes(space: XSpace, pattern: re.Pattern) -> list[tuple[int, object]]:
    return [(int(m.group(1)), p) for p in space.planes if (m := pattern.match(p.name))]


def _tpu_detect(space: XSpace) -> bool:
    return any("XLA Ops" in PlaneIndex(p).line_names for _, p in _device_planes(space, _TPU_PLANE))


def _device_step_windows(idx: PlaneIndex) -> StepWindows:
    """Steps from a device plane's ``Steps`` line: step_num stat, else a numeric name, else order."""
    line = idx.line("Steps")
    if line is None:
        return StepWindows([])
    windows = []
    for i, (ev, start, dur) in enumerate(_line_events(line)):
        stats = idx.stats(ev.stats)
        name = idx.event_names.get(ev.metadata_id, "")
        step = stats.get(STEP_NUM, int(name) if name.isdigit() else i)
        windows.append((start, start + dur, int(step)))
    return StepWindows(windows)


def _module_windows(idx: PlaneIndex) -> StepWindows:
    """XLA Modules line as windows whose 'step' is an index into ``names``."""
    line = idx.line("XLA Modules")
    if line is None:
        return StepWindows([])
    windows = [(start, start + dur, ev.metadata_id) for ev, start, dur in _line_events(line)]
    return StepWindows(windows)


def _tpu_extract(space: XSpace) -> Columns:
    cols = Columns()
    host_steps, _ = _host_steps(space)
    for device, plane in _device_planes(space, _TPU_PLANE):
        idx = PlaneIndex(plane)
        ops_line = idx.line("XLA Ops")
        if ops_line is None:
            continue
        steps = _device_step_windows(idx) or StepWindows(
            zip(host_steps.starts, host_steps.ends, host_steps.steps), open_ended=True)
        modules = _module_windows(idx)
        mod_stat = idx.stat_ids.get("hlo_module")
        meta_module = {k: idx.stats(m.stats).get("hlo_module")
                       for k, m in plane.event_metadata.items()}
        for ev, start, dur in _line_events(ops_line):
            module = meta_module.get(ev.metadata_id)
            for st in ev.stats:
                if st.metadata_id == mod_stat:
                    module = idx.value(st)
            if not module:
                mid = modules.step_at(start)
                module = _MODULE_SUFFIX.sub("", idx.event_names.get(mid, "")) if mid >= 0 else ""
            step = steps.step_at(start) if steps else 0
            cols.add(module, idx.event_names.get(ev.metadata_id, ""), device, step, start, dur)
    return cols


# --- GPU ----------------------------------------------------------------------------------
def _gpu_detect(space: XSpace) -> bool:
    return any(any(m.name == "hlo_op" for m in p.stat_metadata.values())
               for _, p in _device_planes(space, _GPU_PLANE))


def _gpu_extract(space: XSpace) -> Columns:
    cols = Columns()
    host_steps, _ = _host_steps(space)
    for device, plane in _device_planes(space, _GPU_PLANE):
        idx = PlaneIndex(plane)
        steps = _device_step_windows(idx) or StepWindows(
            zip(host_steps.starts, host_steps.ends, host_steps.steps), open_ended=True)
        kernels = []
        for line in idx.lines(lambda name: name not in _GPU_NON_KERNEL_LINES):
            for ev, start, dur in _line_events(line):
                stats = idx.stats(ev.stats) if ev.stats else {}
                op = stats.get("hlo_op") or idx.stats(
                    plane.event_metadata[ev.metadata_id].stats).get("hlo_op")
                if op:
                    kernels.append((start, dur, stats.get("hlo_module", ""), op))
        kernels.sort()
        prev = None
        for start, dur, module, op in kernels:
            step = steps.step_at(start) if steps else 0
            key = (module, op, step)
            if key == prev:  # another kernel of the same HLO op execution
                cols.duration_ns[-1] += dur
                continue
            cols.add(module, op, device, step, start, dur)
            prev = key
    return cols


@dataclass(frozen=True)
class Layout:
    detect: Callable[[XSpace], bool]
    extract: Callable[[XSpace], Columns]


# Order matters: device planes first; the CPU layout also matches the host plane of GPU runs.
LAYOUTS: dict[str, Layout] = {
    "tpu": Layout(_tpu_detect, _tpu_extract),
    "gpu": Layout(_gpu_detect, _gpu_extract),
    "cpu": Layout(_cpu_detect, _cpu_extract),
}
