"""What the host did that a device can wait on (``schema.HOST_EVENTS``): the launches of each
program execution, the copies of inputs to the devices, host callbacks and copies back.

Read from the host plane's own threads (the Python thread and others; XLA's ``tf_*`` thread-pool
lines hold the CPU devices' ops, not the host's) and, on GPU, from the device planes' memcpy
events. Each event is known by its name (``KINDS``: a name's start -> the kind of wait it
explains, ``harness.step.waits``; ``HELPERS``: the launches where no outer Execute is
recorded). The host tracer records them at ``host_tracer_level`` 1, the level
``harness.capture.profiler.LEAN_PROFILE`` sets (level 0 records none of them, nor the CPU ops):
a trace taken at level 0, or by a runtime that names none of them, gives an empty table,
and the waits it would explain stay unexplained.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from harness import schema
from harness.trace.planes import HOST_PLANE, XLA_THREAD_PREFIX, PlaneIndex, plane
from harness.trace.space import Space

DISPATCH, INPUT, HOST = "dispatch", "input", "host"
# An event's name (its start) -> the kind of wait it explains. The launch of one program's
# execution by the host (PjRt's Execute, on the thread that called it; the per-device
# "[n] ...Execute" events of the CPU thread pool start with "[" and are not it); copies to the
# devices; host callbacks and copies to the host.
KINDS = {
    "CommonPjRtLoadedExecutable::Execute": DISPATCH,
    "PjRtCApiLoadedExecutable::Execute": DISPATCH,
    "TfrtTpuLoadedExecutable::Execute": DISPATCH,
    "tpu::System::TransferToDevice": INPUT, "tpu::System::TransferFromDevice": HOST,
    "MemcpyH2D": INPUT, "TransferToDevice": INPUT, "TransferLiteralToDevice": INPUT,
    "TransferToInfeed": INPUT, "Infeed": INPUT, "BufferFromHostBuffer": INPUT,
    # jax.device_put of a host array: jaxlib's call, and XLA:CPU's copy on its own thread
    "DevicePutWithSharding": INPUT, "H2D Dispatch": INPUT,
    "MemcpyD2H": HOST, "TransferFromOutfeed": HOST, "TransferLiteralFromDevice": HOST,
    "CopyToHost": HOST, "CopyRawToHost": HOST, "ToLiteral": HOST, "HostCallback": HOST,
    "CpuCallback": HOST, "xla_python_cpu_callback": HOST, "xla_ffi_python_cpu_callback": HOST,
    "xla_python_gpu_callback": HOST, "xla_ffi_python_gpu_callback": HOST,
}
# The per-execution helper under a runtime's Execute: the launch itself where the runtime
# records no outer Execute (XLA:CPU's single-device path, StreamExecutor on ROCm, TFRT on TPU),
# nested inside it where it does (PjRt on an H100: each launch both), so read only then.
HELPERS = ("CommonPjRtLoadedExecutable::ExecuteHelper",
           "PjRtStreamExecutorLoadedExecutable::ExecuteHelper",
           "TfrtTpuLoadedExecutable::ExecuteHelper")
_DEVICE_PLANE = re.compile(r"/device:(?:GPU|TPU):(\d+)$")


def kind_of(name: str) -> str:
    """The kind of wait an event named ``name`` explains, "" for none (``KINDS``). A dispatch
    is the outer Execute alone: PjRt's C API wraps the same launch in a second one."""
    for start, kind in KINDS.items():
        if name.startswith(start):
            rest = name[len(start):]
            if kind == DISPATCH and rest and not rest.startswith(" ("):
                return ""
            return kind
    return ""


def _helper(name: str) -> str:
    return DISPATCH if name.startswith(HELPERS) else ""


def host_events(space: Space) -> pd.DataFrame:
    """``schema.HOST_EVENTS`` of one host's trace (module docstring), sorted by start; the
    C API's Execute is left out where the trace also has PjRt's own (the same launch)."""
    parts = []
    host = plane(space, HOST_PLANE)
    if host is not None:
        idx = PlaneIndex(host)

        def own(name: str) -> bool:
            return not name.startswith(XLA_THREAD_PREFIX)

        parts.append(_events(idx, -1, own))
        if not (parts[-1][schema.KIND] == DISPATCH).any():  # the helpers are the launches
            parts.append(_events(idx, -1, own, only=(DISPATCH,), classify=_helper))
    for p in space.planes:
        m = _DEVICE_PLANE.match(p.name)
        if m:
            parts.append(_events(PlaneIndex(p), int(m.group(1)), lambda name: True,
                                 only=(INPUT, HOST)))
    out = pd.concat(parts, ignore_index=True) if parts else _empty()
    if out.empty:
        return _empty()[list(schema.HOST_EVENTS)]
    dispatch = out[schema.KIND] == DISPATCH
    names = out.pop("_name")
    if (names[dispatch].str.startswith("CommonPjRt")).any():
        out = out[~(dispatch & names.str.startswith("PjRtCApi"))]
    out = out.sort_values(schema.START_NS, kind="stable").reset_index(drop=True)
    return out[list(schema.HOST_EVENTS)]


def _events(idx: PlaneIndex, device: int, want, only=(DISPATCH, INPUT, HOST),
            classify=kind_of) -> pd.DataFrame:
    kinds = {mid: k for mid, name in idx.event_names.items()
             if (k := classify(name)) and k in only}
    if not kinds:
        return _empty()
    rows = []
    for line in idx.lines(want):
        hit = np.flatnonzero(np.isin(line.metadata_id, list(kinds)))
        if not len(hit):
            continue
        ev = line.events(hit)
        rows.append(pd.DataFrame({
            schema.KIND: [kinds[int(m)] for m in ev.metadata_id.tolist()],
            schema.DEVICE: device, schema.START_NS: ev.start_ns.astype(np.int64),
            schema.DURATION_NS: ev.duration_ns.astype(np.int64),
            "_name": [idx.event_names[int(m)] for m in ev.metadata_id.tolist()]}))
    if not rows:
        return _empty()
    return pd.concat(rows, ignore_index=True).assign(**{schema.HOST: 0})


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == schema.KIND else np.int64)
                         for c in (*schema.HOST_EVENTS, "_name")})
