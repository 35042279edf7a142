"""The TPU layout: planes ``/device:TPU:<n>``, line ``XLA Ops``.

The event name is the HLO op; modules come from the ``XLA Modules`` line, steps from the
``Steps`` line, else from the host's step annotations. (GPU: ``harness.trace.gpu``.)
"""
from __future__ import annotations

import re

import numpy as np

from harness.trace.planes import (
    Columns,
    PlaneIndex,
    StepWindows,
    device_planes,
    device_step_windows,
    host_steps,
    line_arrays,
    line_events,
    names_of,
)
from harness.trace.xplane import XLine, XSpace

_TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
_MODULE_SUFFIX = re.compile(r"\(\d+\)$")  # "jit_step(12)" -> "jit_step"


def detect(space: XSpace) -> bool:
    return any("XLA Ops" in PlaneIndex(p).line_names for _, p in device_planes(space, _TPU_PLANE))


def _module_windows(idx: PlaneIndex) -> StepWindows:
    """XLA Modules line as windows whose 'step' is an index into ``names``."""
    line = idx.line("XLA Modules")
    if line is None:
        return StepWindows([])
    windows = [(start, start + dur, ev.metadata_id) for ev, start, dur in line_events(line)]
    return StepWindows(windows)


def extract(space: XSpace) -> Columns:
    """Vectorized over each plane's ``XLA Ops`` line: no per-event Python beyond three reads."""
    cols = Columns()
    annotated, _ = host_steps(space)
    cols.stepped = bool(annotated)
    for device, plane in device_planes(space, _TPU_PLANE):
        idx = PlaneIndex(plane)
        raw = idx.raw_line("XLA Ops")
        if raw is None:
            continue
        steps = device_step_windows(idx) or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        cols.stepped = cols.stepped or bool(steps)
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
