"""jax.profiler's Chrome JSON trace (``*.trace.json.gz``: what Perfetto opens and what people
attach to issues), read where no XSpace (``*.xplane.pb``) is at hand. TPU only.

xprof writes each XSpace plane as a process (``pid``, named by ``process_name`` metadata) and
each line as a thread (``tid``, ``thread_name``); an event's stats become its ``args``, as text.
On each ``/device:TPU:<n>`` process:

- ``XLA Modules``: one ``X`` event per program execution, named ``jit_step(<program id>)``;
- ``XLA Ops``: one per op execution, named by the op, with ``device_duration_ps`` and
  ``device_offset_ps`` (the device's own time), ``long_name`` (the whole HLO instruction),
  ``hlo_category``, ``bytes_accessed``, ``model_flops``, ``tf_op`` and ``source``;
- ``Steps``, where the program was stepped.

They are read as ``harness.trace.tpu`` reads the XSpace: an op's time is its self time from the
device's stats (``tpu.self_times``), ``start_ns`` the event's ``ts`` (the trace's clock, shared
by every process), its program and program id the ``XLA Modules`` event enclosing it, its step
the ``Steps`` event enclosing it, else a host ``step_num`` annotation, else none (each
execution is then a step). ``ChromeTrace`` stands where the XSpace stands downstream: it has no
planes; it names its ``device`` (a TPU whose chip the file does not name: ``--chip`` gives it,
``harness.trace.device.trace_device``) and carries each program's HLO rebuilt from its ops'
texts (``hlo_texts``: ``harness.trace.chrome_hlo``, read by ``harness.trace.hlo_proto``).

What other Chrome JSON traces lack is said in one line (``REFUSALS``): JAX's GPU and CPU traces
name each op (``hlo_op``) but carry neither its instruction text (``long_name`` is the TPU
op's metadata name) nor the programs' HLO (``/host:metadata`` is not in the JSON), so nothing in
them can be costed; PyTorch's trace holds torch ops and CUDA kernels, no XLA program at all.
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.errors import TraceError
from harness.trace.device import Device
from harness.trace.planes import Columns, StepWindows
from harness.trace.tpu import self_times

SUFFIXES = (".trace.json.gz", ".trace.json")  # what jax.profiler names its Chrome JSON
TPU_PROCESS = re.compile(r"^/device:TPU:(\d+)$")
MODULES, OPS, STEPS = "XLA Modules", "XLA Ops", "Steps"
DURATION_PS, OFFSET_PS, STEP_NUM = "device_duration_ps", "device_offset_ps", "step_num"
_PROGRAM = re.compile(r"^(.*)\((\d+)\)$")  # "jit_step_fun(5120112285394406626)"
# the device's name, for reports and the chip's look-up (which it matches none of)
UNNAMED = "TPU (its Chrome JSON trace names no chip)"
REBUILT = ("the HLO was rebuilt from the Chrome JSON trace's op texts (long_name): fusion bodies "
           "are unknown, so a fusion is priced from the trace's own model_flops and its operands' "
           "and result's bytes, and one without them is left unmodeled")
_XSPACE = ("harness reads the *.xplane.pb that jax.profiler writes beside it "
           "(plugins/profile/<run>/)")


@dataclass(eq=False)
class ChromeTrace:
    """A TPU Chrome JSON trace read whole: per device its ops (``ops``: device -> columns) and
    program executions, its ``device``, the HLO text rebuilt for each (name, program id)
    (``hlo_texts``) and the notes a report of it carries. ``planes`` is empty: the XSpace
    readers find nothing in it."""

    label: str
    ops: dict
    modules: dict
    steps: dict
    host_steps: StepWindows
    device: Device
    hlo_texts: dict = field(default_factory=dict)
    notes: tuple = (REBUILT,)
    planes: tuple = ()


def looks_like_json(head: bytes) -> bool:
    """Whether a file's first bytes are a (gzipped) JSON document, not an XSpace."""
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")


def _document(raw: bytes, label: str) -> dict:
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        doc = json.loads(text)
    except (OSError, EOFError, zlib.error, ValueError, RecursionError) as e:
        raise TraceError(f"{label}: truncated or corrupt Chrome JSON trace "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    doc = {"traceEvents": doc} if isinstance(doc, list) else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents", []), list):
        raise TraceError(f"{label}: a JSON file, but not a Chrome trace (no traceEvents list)")
    return doc


def _names(events: list, kind: str) -> dict:
    """pid (process_name) or (pid, tid) (thread_name) -> name, from the metadata events."""
    key = (lambda e: e.get("pid")) if kind == "process_name" else (
        lambda e: (e.get("pid"), e.get("tid")))
    return {key(e): str((e.get("args") or {}).get("name", "")) for e in events
            if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == kind}


def _has_device(prefix: str) -> Callable[[dict, dict], bool]:
    return lambda doc, processes: any(n.startswith(prefix) for n in processes.values())


# What a Chrome JSON trace that is not jax.profiler's TPU trace lacks, in one line each; the
# first whose test holds is said.
REFUSALS: dict[str, tuple[Callable[[dict, dict], bool], str]] = {
    "pytorch": (lambda doc, processes: "schemaVersion" in doc or "deviceProperties" in doc,
                "a PyTorch profiler trace (torch ops and CUDA kernels as Chrome JSON), not a JAX "
                "one: no XLA program or op in it; harness reads jax.profiler's *.xplane.pb, or "
                "its TPU *.trace.json.gz"),
    "gpu": (_has_device("/device:GPU:"),
            "a JAX Chrome/Perfetto JSON trace of GPU devices: its kernels name their op "
            "(hlo_op) but not its HLO text, and the programs' HLO (/host:metadata) is not in "
            f"the JSON, so no op could be costed; {_XSPACE}"),
    "cpu": (_has_device("/host:CPU"),
            "a JAX Chrome/Perfetto JSON trace of the host CPU alone: its ops name themselves "
            "(hlo_op) but not their HLO text, and the programs' HLO (/host:metadata) is not in "
            f"the JSON, so no op could be costed; {_XSPACE}"),
}


def _refused(doc: dict, processes: dict, label: str) -> TraceError:
    said = next((why for test, why in REFUSALS.values() if test(doc, processes)), None)
    return TraceError(f"{label}: " + (said or f"a Chrome/Perfetto JSON trace with no TPU op "
                                               f"timeline ('{OPS}' of a /device:TPU:n process); "
                                               f"{_XSPACE}"))


def read(raw: bytes, label: str) -> ChromeTrace:
    """A Chrome JSON trace (its bytes, gzipped or not) read whole; a one-line ``TraceError``
    for a damaged file or one that is not jax.profiler's TPU trace (``REFUSALS``)."""
    doc = _document(raw, label)
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    processes, threads = _names(events, "process_name"), _names(events, "thread_name")
    devices = {pid: int(m.group(1)) for pid, name in processes.items()
               if (m := TPU_PROCESS.match(name))}
    wanted = {key: name for key, name in threads.items()
              if key[0] in devices and name in (MODULES, OPS, STEPS)}
    by_thread: dict = {key: [] for key in wanted}
    host = []
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        if key in by_thread:
            by_thread[key].append(e)
        elif STEP_NUM in (e.get("args") or {}) and e.get("pid") not in devices:
            host.append(e)
    lines = {(devices[key[0]], name): by_thread[key] for key, name in wanted.items()}
    if not any(lines.get((d, OPS)) for d in devices.values()):
        raise _refused(doc, processes, label)
    try:
        return _trace(lines, sorted(devices.values()), host, label)
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(f"{label}: malformed Chrome JSON trace event ({type(e).__name__}: "
                         f"{e})") from None


def _trace(lines: dict, devices: list, host: list, label: str) -> ChromeTrace:
    ops, modules, steps = {}, {}, {}
    for d in devices:
        if lines.get((d, OPS)):
            ops[d] = _ops(lines[(d, OPS)])
            modules[d] = _windows(lines.get((d, MODULES), []))
            steps[d] = _windows(lines.get((d, STEPS), []), STEP_NUM)
    from harness.trace import chrome_hlo  # imports harness.hlo (pandas): once a trace is read

    texts = chrome_hlo.rebuild(_first_texts(lines, ops, modules), len(devices))
    device = Device(platform="tpu", count=len(devices), name=UNNAMED)
    return ChromeTrace(label, ops, modules, steps, _host_steps(host), device, texts)


def _ts_ns(events: list) -> np.ndarray:
    return np.rint(np.array([float(e["ts"]) for e in events]) * 1e3).astype(np.int64)


def _ps(events: list, stat: str, fallback: np.ndarray) -> np.ndarray:
    """A device stat in ps of each event (text in the JSON), ``fallback`` where absent."""
    found = [(e.get("args") or {}).get(stat) for e in events]
    return np.array([int(v) if v is not None else int(f) for v, f in zip(found, fallback)],
                    dtype=np.int64)


def _ops(events: list) -> dict:
    """One device's ``XLA Ops`` as columns: op, start (ns, the trace's clock), self time (ns,
    from the device's stats, rounded), and the events themselves (for their HLO text)."""
    start = _ts_ns(events)
    length = np.rint(np.array([float(e.get("dur", 0)) for e in events]) * 1e6).astype(np.int64)
    begin = _ps(events, OFFSET_PS, start * 1000)
    duration = _ps(events, DURATION_PS, length)
    return {"op": [str(e["name"]) for e in events], "start_ns": start,
            "duration_ns": (self_times(begin, duration) + 500) // 1000, "events": events}


def _windows(events: list, named_by: str = "") -> tuple[StepWindows, list[str]]:
    """Events as time windows on the trace's clock, each's 'step' an index into their names
    (the arg ``named_by`` where an event has it, else its name)."""
    start = _ts_ns(events)
    end = start + np.rint(np.array([float(e.get("dur", 0)) for e in events]) * 1e3).astype(
        np.int64)
    names = [str((e.get("args") or {}).get(named_by, e["name"])) for e in events]
    return StepWindows(zip(start.tolist(), end.tolist(), range(len(events)))), names


def _host_steps(events: list) -> StepWindows:
    """The host's step annotations (``step_num``), open-ended: device work trails the host."""
    start = _ts_ns(events)
    return StepWindows(((int(s), int(s), int(e["args"][STEP_NUM])) for s, e in
                        zip(start.tolist(), events)), open_ended=True)


def _step_numbers(windows: tuple[StepWindows, list[str]], at: np.ndarray) -> np.ndarray:
    """The step of each time ``at`` from a device's ``Steps`` windows (-1 outside them): its
    ``step_num``, else its numeric name, else its place."""
    found, names = windows
    index = found.assign(at)
    numbers = np.array([int(n) if n.isdigit() else k for k, n in enumerate(names)] or [0],
                       dtype=np.int64)
    return np.where(index >= 0, numbers[np.maximum(index, 0)], -1)


def _program_of(name: str) -> tuple[str, str]:
    m = _PROGRAM.match(name)
    return (m.group(1), m.group(2)) if m else (name, "")


def _first_texts(lines: dict, ops: dict, modules: dict) -> dict:
    """(program, program id) -> {op: its first event's args}, in the order the ops first ran
    (device by device)."""
    out: dict = {}
    for d, cols in ops.items():
        windows, names = modules[d]
        index = windows.assign(cols["start_ns"])
        for k, e in zip(index.tolist(), cols["events"]):
            if k >= 0:
                out.setdefault(_program_of(names[k]), {}).setdefault(str(e["name"]),
                                                                     e.get("args") or {})
    return out


def extract(trace: ChromeTrace) -> Columns:
    """The EVENTS columns of a ``ChromeTrace`` (``harness.trace.formats``): each device's ops,
    their program and id from the ``XLA Modules`` event enclosing them (-1 step outside every
    one), their step from its ``Steps`` line, else the host's annotations, else 0."""
    parts = []
    stepped = bool(trace.host_steps)
    for d, cols in trace.ops.items():
        windows, names = trace.modules[d]
        index = windows.assign(cols["start_ns"])
        programs = [_program_of(n) for n in names] + [("", "")]  # -1: outside every program
        if trace.steps[d][0]:
            step, stepped = _step_numbers(trace.steps[d], cols["start_ns"]), True
        elif trace.host_steps:
            step = trace.host_steps.assign(cols["start_ns"])
        else:
            step = np.zeros(len(index), np.int64)
        step = np.where(index >= 0, step, -1)
        parts.append(([programs[k][0] for k in index.tolist()], cols["op"],
                      np.full(len(index), d, np.int64), step, cols["start_ns"],
                      cols["duration_ns"], [programs[k][1] for k in index.tolist()]))
    names = ("program", "op", "device", "step", "start_ns", "duration_ns", "program_id")
    cols = Columns(**{n: np.concatenate([np.asarray(p, dtype=object if k in (0, 1, 6) else None)
                                         for p in c])
                      for k, (n, c) in enumerate(zip(names, zip(*parts)))})
    cols.stepped = stepped
    return cols


def detect(space) -> bool:
    return isinstance(space, ChromeTrace)
