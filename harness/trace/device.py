"""Device layouts: TPU (``/device:TPU:<n>``, line ``XLA Ops``) and GPU (``/device:GPU:<n>``).

TPU: the event name is the HLO op; modules come from the ``XLA Modules`` line, steps from the
``Steps`` line. GPU: kernel events on per-stream lines carry ``hlo_op`` / ``hlo_module`` stats;
consecutive kernels of one HLO op fold into one execution whose duration is the sum of its
kernels'. Steps come from a ``Steps`` line, else from the host's step annotations.
"""
from __future__ import annotations

import re

import numpy as np

from harness.trace.planes import (
    STEP_NUM,
    Columns,
    PlaneIndex,
    StepWindows,
    host_steps,
    line_arrays,
    line_events,
    names_of,
)
from harness.trace.xplane import XLine, XSpace

_TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_MODULE_SUFFIX = re.compile(r"\(\d+\)$")  # "jit_step(12)" -> "jit_step"
_GPU_NON_KERNEL_LINES = {"XLA Modules", "XLA Ops", "Steps", "Launch Stats", "Framework Name Scope",
                         "Framework Ops", "Source code", "TensorFlow Name Scope"}


def _device_planes(space: XSpace, pattern: re.Pattern) -> list[tuple[int, object]]:
    return [(int(m.group(1)), p) for p in space.planes if (m := pattern.match(p.name))]


def tpu_detect(space: XSpace) -> bool:
    return any("XLA Ops" in PlaneIndex(p).line_names for _, p in _device_planes(space, _TPU_PLANE))


def _device_step_windows(idx: PlaneIndex) -> StepWindows:
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


def _module_windows(idx: PlaneIndex) -> StepWindows:
    """XLA Modules line as windows whose 'step' is an index into ``names``."""
    line = idx.line("XLA Modules")
    if line is None:
        return StepWindows([])
    windows = [(start, start + dur, ev.metadata_id) for ev, start, dur in line_events(line)]
    return StepWindows(windows)


def tpu_extract(space: XSpace) -> Columns:
    """Vectorized over each plane's ``XLA Ops`` line: no per-event Python beyond three reads."""
    cols = Columns()
    annotated, _ = host_steps(space)
    for device, plane in _device_planes(space, _TPU_PLANE):
        idx = PlaneIndex(plane)
        raw = idx.raw_line("XLA Ops")
        if raw is None:
            continue
        steps = _device_step_windows(idx) or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        mids, start, dur = line_arrays(raw)
        step = steps.assign(start) if steps else np.zeros(len(mids), dtype=np.int64)
        cols.program.extend(_tpu_modules(idx, raw, mids, start))
        cols.op.extend(names_of(mids, idx.event_names))
        cols.device.extend([device] * len(mids))
        cols.step.extend(step.tolist())
        cols.start_ns.extend(start.tolist())
        cols.duration_ns.extend(dur.tolist())
    return cols


def _tpu_modules(idx: PlaneIndex, raw: bytes, mids: np.ndarray, start: np.ndarray) -> list:
    """Each op's HLO module: an ``hlo_module`` stat on the op (its metadata, else the event),
    else the ``XLA Modules`` event enclosing it, named without its program id."""
    meta = {k: idx.stats(m.stats).get("hlo_module", "")
            for k, m in idx.plane.event_metadata.items()}
    if all(meta.get(int(m)) for m in np.unique(mids)):
        return names_of(mids, meta)
    if "hlo_module" in idx.stat_ids:  # per-event stats: read them (rare, so not vectorized)
        found = [idx.stats(ev.stats).get("hlo_module") or meta.get(ev.metadata_id, "")
                 for ev in XLine.FromString(raw).events]
        if all(found):
            return found
    enclosing = _module_windows(idx).assign(start)
    return names_of(enclosing, idx.event_names, lambda n: _MODULE_SUFFIX.sub("", n))


# --- GPU ----------------------------------------------------------------------------------
def gpu_detect(space: XSpace) -> bool:
    return any(any(m.name == "hlo_op" for m in p.stat_metadata.values())
               for _, p in _device_planes(space, _GPU_PLANE))


def gpu_extract(space: XSpace) -> Columns:
    cols = Columns()
    annotated, _ = host_steps(space)
    for device, plane in _device_planes(space, _GPU_PLANE):
        idx = PlaneIndex(plane)
        steps = _device_step_windows(idx) or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        kernels = []
        for line in idx.lines(lambda name: name not in _GPU_NON_KERNEL_LINES):
            for ev, start, dur in line_events(line):
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
