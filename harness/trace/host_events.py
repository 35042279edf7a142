"""What the host did that a device can wait on (``schema.HOST_EVENTS``): the launches of each
program execution, the copies of inputs to the devices, host callbacks and copies back, and the
user's own annotations and Python frames, which name the host's work between steps.

Read from the host plane's own threads (the Python thread and others; XLA's ``tf_*`` thread-pool
lines hold the CPU devices' ops, not the host's) and, on GPU, from the device planes' memcpy
events. Each event is known by its name (``KINDS``: a name's start -> the kind of wait it
explains, ``harness.step.waits``; ``HELPERS``: the launches where no outer Execute is
recorded). The host tracer records them at ``host_tracer_level`` 1, the level
``harness.capture.profiler.LEAN_PROFILE`` sets (level 0 records none of them, nor the CPU ops):
a trace taken at level 0, or by a runtime that names none of them, gives an empty table,
and the waits it would explain stay unexplained.

Any other event of a host thread that launched programs (the user's Python thread; the
others are the runtime's) is the user's (kind ``annotation``): a ``jax.profiler.TraceAnnotation``
or ``annotate_function``, or, in a trace taken at ``python_tracer_level`` 1, a Python frame
(``$file.py:NN fn``); unless it is the runtime's own (its name starts with one of
``INTERNAL``), lies inside such an event or a runtime event (their internals), or holds a
launch (the loop around the steps, a step marker: it names no work between steps). Of those
nested in one another the outermost is kept; a frame of ``WRAPPERS`` is passed over. They name
the host's own work between steps (``harness.step.between.python_names``) and explain no wait.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from harness import schema
from harness.trace.planes import HOST_PLANE, XLA_THREAD_PREFIX, PlaneIndex, plane
from harness.trace.space import Space

DISPATCH, INPUT, HOST, ANNOTATION = "dispatch", "input", "host", "annotation"
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
# The runtime's own events on the host's threads, no annotation of the user's (each a name's
# start; what lies inside one is its too): jaxlib's jitted call and its Python bookkeeping,
# PjRt's, XLA's, TSL's and the TPU runtime's internals, the waits on a buffer's holds.
INTERNAL = ("PjitFunction", "PmapFunction", "PythonRefManager", "ParseArguments", "CommonPjRt",
            "PjRt", "Tfrt", "tpu::", "xla::", "tsl::", "se::", "ThreadpoolListener",
            "Wait for ", "MemoryAllocation", "MemoryDeallocation")
# Python frames that wrap the user's code and name none of it, passed over (what lies inside
# one is still read): jax.profiler.annotate_function's wrapper, around the annotation it makes.
WRAPPERS = ("$profiler.py:", "$<unknown>")
_DEVICE_PLANE = re.compile(r"/device:(?:GPU|TPU):(\d+)$")
# an event name's role on a host's own line (``_role``)
_USER, _TOLD, _LAUNCH, _HELPER, _INTERNAL, _WRAPPER = range(6)


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


def _role(name: str) -> int:
    kind = kind_of(name)
    if kind:
        return _LAUNCH if kind == DISPATCH else _TOLD
    if name.startswith(HELPERS):
        return _HELPER
    if name.startswith(INTERNAL):
        return _INTERNAL
    return _WRAPPER if name.startswith(WRAPPERS) else _USER


def host_events(space: Space) -> pd.DataFrame:
    """``schema.HOST_EVENTS`` of one host's trace (module docstring), sorted by start; the
    C API's Execute is left out where the trace also has PjRt's own (the same launch)."""
    parts = []
    host = plane(space, HOST_PLANE)
    if host is not None:
        parts.append(_plane_events(PlaneIndex(host), -1, user=True))
    for p in space.planes:
        m = _DEVICE_PLANE.match(p.name)
        if m:
            parts.append(_plane_events(PlaneIndex(p), int(m.group(1)), user=False))
    out = pd.concat(parts, ignore_index=True) if parts else _empty()
    if out.empty:
        return _empty()
    dispatch = out[schema.KIND] == DISPATCH
    names = out[schema.EVENT_NAME].astype(str)
    if (names[dispatch].str.startswith("CommonPjRt")).any():
        out = out[~(dispatch & names.str.startswith("PjRtCApi"))]
    out = out.sort_values(schema.START_NS, kind="stable").reset_index(drop=True)
    out[schema.EVENT_NAME] = out[schema.EVENT_NAME].astype("category")
    return out[list(schema.HOST_EVENTS)]


def _plane_events(idx: PlaneIndex, device: int, user: bool) -> pd.DataFrame:
    """One plane's events: of the host's (``user``: its own lines, the launches, copies,
    callbacks and the user's annotations), of a device's (its copies and callbacks)."""
    names = idx.event_names
    ids = np.fromiter(names.keys(), np.int64, len(names))
    roles = np.fromiter((_role(n) for n in names.values()), np.int8, len(names))
    by = np.argsort(ids)
    ids, roles = ids[by], roles[by]
    if not user:
        roles[roles != _TOLD] = _INTERNAL
    lines = idx.lines(lambda name: not name.startswith(XLA_THREAD_PREFIX)) if user \
        else idx.lines()
    rows = [r for line in lines if (r := _line_events(line, ids, roles, user)) is not None]
    if not rows:
        return _empty()
    mid, role, start, duration = (np.concatenate(c) for c in zip(*rows))
    if (role == _LAUNCH).any():  # the helpers are nested in the launches: not read
        keep = role != _HELPER
        mid, role, start, duration = mid[keep], role[keep], start[keep], duration[keep]
    # each distinct name once: its kind and its category
    u, at = np.unique(mid, return_inverse=True)
    text = [names[int(m)] for m in u.tolist()]
    cats, code = np.unique(np.array(text, dtype=object), return_inverse=True)
    kind = np.array([kind_of(t) for t in text] + [DISPATCH, ANNOTATION], dtype=object)
    k = np.where(role == _USER, len(u) + 1, np.where(role == _TOLD, at, len(u)))
    return pd.DataFrame({schema.HOST: 0, schema.KIND: kind[k], schema.DEVICE: device,
                         schema.START_NS: start, schema.DURATION_NS: duration,
                         schema.EVENT_NAME: pd.Categorical.from_codes(code[at], cats)})


def _line_events(line, ids: np.ndarray, roles: np.ndarray, user: bool):
    """One line's events read (metadata ids, roles, starts, durations): the runtime's that
    explain a wait, and the user's (``user``; module docstring); None for none."""
    if not len(line):
        return None
    at = np.minimum(np.searchsorted(ids, line.metadata_id), len(ids) - 1)
    role = np.where(ids[at] == line.metadata_id, roles[at], _INTERNAL)
    told = (role == _TOLD) | (role == _LAUNCH) | (role == _HELPER)
    # the user's on a thread that launched programs alone (the other threads are the runtime's)
    launched = ((role == _LAUNCH) | (role == _HELPER)).any()
    if not (user and launched and (role == _USER).any()):
        hit = np.flatnonzero(told)
        if not len(hit):
            return None
        ev = line.events(hit)
        return ev.metadata_id, role[hit], ev.start_ns, ev.duration_ns
    rows = np.flatnonzero(role != _WRAPPER)
    ev, role = line.events(rows), role[rows]
    s, d = ev.start_ns.astype(np.int64), ev.duration_ns.astype(np.int64)
    keep = told[rows] | _users(s, s + d, role)
    return ev.metadata_id[keep], role[keep], s[keep], d[keep]


def _users(s: np.ndarray, e: np.ndarray, role: np.ndarray) -> np.ndarray:
    """Of one line's events [s, e) (``role``: each one's), the user's to keep (module
    docstring): of the ``_USER`` ones, those outside every other event of the runtime's, that
    hold no launch, and outermost among those left."""
    o = np.lexsort((s - e, s))  # by start, an enclosing event before those inside it
    s, e, role = s[o], e[o], role[o]
    runtime = role != _USER
    rs, re_ = s[runtime], e[runtime]
    top = rs >= _before(np.maximum.accumulate(re_))  # the runtime's outermost
    rs, re_ = rs[top], re_[top]
    c = np.flatnonzero(~runtime)
    j = np.searchsorted(rs, s[c], side="right") - 1
    inside = (j >= 0) & (e[c] <= re_[np.maximum(j, 0)]) if len(rs) else j >= 0
    launch = np.sort(s[(role == _LAUNCH) | (role == _HELPER)])
    holds = (np.searchsorted(launch, e[c], side="right")
             - np.searchsorted(launch, s[c], side="left")) > 0
    c = c[~inside & ~holds]
    c = c[s[c] >= _before(np.maximum.accumulate(e[c]))]  # outermost of those left
    out = np.zeros(len(o), bool)
    out[o[c]] = True
    return out


def _before(reach: np.ndarray) -> np.ndarray:
    """The running maximum before each element (the lowest int64 before the first)."""
    return np.concatenate([[np.iinfo(np.int64).min], reach[:-1]]) if len(reach) else reach


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == schema.KIND else
                                      "category" if c == schema.EVENT_NAME else np.int64)
                         for c in schema.HOST_EVENTS})
