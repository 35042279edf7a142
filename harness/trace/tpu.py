"""The TPU format, read as xprof reads it: planes ``/device:TPU:<n>``, line ``XLA Ops``.

- **Op names.** An ``XLA Ops`` event's metadata ``name`` is the whole HLO instruction text
  (``%copy-done.2 = f32[...] copy-done(...)``); the op is its ``display_name``, else an
  ``hlo_op`` stat (of the event or its metadata), else the name before ``=`` in that text
  (``op_name``). xprof names an op the same way (``SetOpMetadataFromHloEventMetadata`` in
  ``xprof/utils/op_metrics_db_utils.cc``: the display name, else the name).
- **Op times.** The device's own busy time is the event stat ``device_duration_ps`` (from
  ``device_offset_ps``), else the event's duration. An op's time is its *self time*: that
  duration less the durations of the ops nested directly inside it (the events of the line
  whose device span it includes), as xprof's ``ConvertTensorCoreDeviceTraceXPlaneToOpMetricsDb``
  does (``xprof/convert/xplane_to_op_metrics_db.cc``: ``GetDeviceEventTimespan``, then an
  ``AncestorStack`` that subtracts each child from its parent). ``start_ns`` stays on the line's
  clock, which the ``XLA Modules`` and ``Steps`` lines and the host's annotations share.
- **Asynchronous pairs.** Only op lines count: xprof reads ``XLA Ops`` (tsl's
  ``IsOpLineName``: ``XLA Ops``, ``TensorFlow Ops``, ``SparseCore Ops``) and never ``Async XLA
  Ops``, whose events span a pair from its ``-start`` to its ``-done`` (display name
  ``async-copy``, stat ``hlo_op`` = the ``-done``). So the self time of a pair in xprof's
  ``hlo_stats`` is two rows of ``XLA Ops`` time: the ``-start`` issuing the transfer (1 to 6 ns
  in the v6e fixture) and the ``-done``, the core blocked until the transfer lands (its exposed
  part: 190 ms for 5.37 GB from host memory). The rule here is the same: ``Async XLA Ops`` is
  not read, and the pair's work is costed on its ``-done`` (``ASYNC_TIME_ON``,
  ``harness.hlo.cost``).
- **Programs.** The name from an ``hlo_module`` stat, else the ``XLA Modules`` event enclosing
  the op, without its ``(program id)``; the id from the metadata's ``program_id`` stat
  (``Columns.program_id``), xprof's key with the op's ``symbol_id`` (``GetOpKeyFromXEvent``).

Steps come from the ``Steps`` line, else from the host's step annotations. (GPU:
``harness.trace.gpu``.)
"""
from __future__ import annotations

import re

import numpy as np

from harness.trace import parallel
from harness.trace.codes import Texts, firsts, tuple_codes
from harness.trace.planes import (
    Columns,
    PlaneIndex,
    StepWindows,
    device_planes,
    device_step_windows,
    device_work,
    host_steps,
)
from harness.trace.space import Space
from harness.trace.statplans import planned_values
from harness.trace.wire import INT64, UINT64, Events, Line

_TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
_MODULE_SUFFIX = re.compile(r"\(\d+\)$")  # "jit_step(12)" -> "jit_step"
_NAME_IN_TEXT = re.compile(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")  # "%copy-done.2 = f32[...] ..."
OPS_LINE = "XLA Ops"
DEVICE_DURATION_PS, DEVICE_OFFSET_PS = "device_duration_ps", "device_offset_ps"
HLO_OP, PROGRAM_ID = "hlo_op", "program_id"
# Which half of an async -start/-done pair the trace gives the time to (harness.hlo.cost):
# on TPU the -done, where the core waits; the -start only issues the transfer.
ASYNC_TIME_ON = "done"


def detect(space: Space) -> bool:
    return any(OPS_LINE in PlaneIndex(p).line_names for _, p in device_planes(space, _TPU_PLANE))


def op_name(name: str, display_name: str = "", hlo_op: str = "") -> str:
    """The op an ``XLA Ops`` event names: its display name, else its ``hlo_op`` stat, else the
    instruction's name in the HLO text ``name`` holds, else ``name`` itself."""
    if display_name or hlo_op:
        return display_name or hlo_op
    m = _NAME_IN_TEXT.match(name)
    return m.group(1) if m else name


def self_times(begin: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Each event's duration less those of the events nested directly inside it (a child lies
    within its parent's span), xprof's self time; events in any order, any unit."""
    begin, duration = np.asarray(begin, np.int64), np.asarray(duration, np.int64)
    order = np.lexsort((-duration, begin))  # the line's order: by start, longest first
    b, d = begin[order], duration[order]
    e = b + d
    if len(b) < 2 or (e[:-1] <= b[1:]).all():
        return duration.copy()  # nothing overlaps, so nothing nests
    parent = _enclosing(e)
    inside = parent >= 0
    children = np.bincount(parent[inside], weights=d[inside], minlength=len(b))
    out = np.empty_like(duration)
    out[order] = d - children.astype(np.int64)
    return out


def _enclosing(e: np.ndarray) -> np.ndarray:
    """For events sorted by start (longest first) ending at ``e``: the one each lies directly
    inside (-1: none), the nearest earlier event that ends no sooner (sorted by start, an event
    is inside another iff it ends in time). Found for all at once by jumping: each holds a
    guess ``p`` such that every event between ``p`` and it ends sooner, and a guess that ends
    sooner too is replaced by its own guess (the chain of enclosing events, halved each pass)."""
    n = len(e)
    p = np.arange(-1, n - 1)
    todo = np.arange(1, n)
    while len(todo):
        guess = p[todo]
        sooner = e[guess] < e[todo]
        todo, guess = todo[sooner], guess[sooner]
        p[todo] = p[guess]
        todo = todo[p[todo] >= 0]
    return p


def _ops_line(line: Line, idx: PlaneIndex, texts: Texts
              ) -> tuple[Events, np.ndarray, np.ndarray, np.ndarray]:
    """(the events, start ns on the line's clock, self time ns, the ``texts`` code of each one's
    ``hlo_op`` stat, -1 where none) of an ``XLA Ops`` line. A line without stats is timed in
    whole ns; otherwise each event's device stats are read and its self time, computed in ps,
    rounded to the ns."""
    ev = line.events()
    n = len(ev)
    if (ev.stats_at == ev.end).all():
        start = ev.start_ns
        return ev, start, self_times(start, ev.duration_ns), np.full(n, -1, np.int64)
    # each event's last stat of each id, read where its kind lays them out
    codes, st = planned_values(ev, [idx.stat_ids.get(k) for k in (
        DEVICE_DURATION_PS, DEVICE_OFFSET_PS, HLO_OP)])
    host = ev.timestamp_ns * 1000 + ev.offset_ps
    begin, dur = host.copy(), ev.duration_ps.copy()
    for e, column in ((codes[:, 0], dur), (codes[:, 1], begin)):
        has = e >= 0  # an int64 or uint64 stat; another kind reads 0 there
        column[has] = np.where(np.isin(st.kind[e[has]], (INT64, UINT64)), st.value[e[has]], 0)
    hlo_ops = np.full(n, -1, np.int64)
    e = codes[:, 2]
    for row in np.flatnonzero(e >= 0).tolist():  # rare: XLA Ops events name ops by metadata
        hlo_ops[row] = texts.of(str(idx.entry_value(st, int(e[row]))))
    # whole nanoseconds, rounded: at most 0.5 ns off per execution
    return ev, host // 1000, (self_times(begin, dur) + 500) // 1000, hlo_ops


def _metadata(idx: PlaneIndex) -> tuple[dict, dict, set]:
    """Per event metadata id: its op name, its program id ("" when none), and the ids whose
    name an event's own ``hlo_op`` stat may give (those without a display name)."""
    names, programs, plain = {}, {}, set()
    for k, m in idx.plane.event_metadata.items():
        stats = idx.stats(m.stats)
        names[k] = op_name(m.name, m.display_name, str(stats.get(HLO_OP) or ""))
        program = stats.get(PROGRAM_ID)
        programs[k] = "" if program is None else str(program)
        if not m.display_name:
            plain.add(k)
    return names, programs, plain


def _module_windows(idx: PlaneIndex) -> StepWindows:
    """XLA Modules line as windows whose 'step' is an index into ``names``."""
    line = idx.line("XLA Modules")
    if line is None:
        return StepWindows([])
    ev = line.events()
    start = ev.start_ns
    return StepWindows(zip(start.tolist(), (start + ev.duration_ns).tolist(),
                           ev.metadata_id.tolist()))


def _read_part(context, part):
    """One part of a TPU trace, read on its own (in a worker process, maybe): the host's step
    annotations (part None), or a device plane's steps and ``XLA Ops`` (module, op, start,
    self time, program id of each execution; names coded by a table of its own, returned with
    them), None where it has no such line."""
    space, planes = context
    if part is None:
        return host_steps(space)[0]
    idx, texts = PlaneIndex(planes[part][1]), Texts()
    line = idx.line(OPS_LINE)
    if line is None:
        return None
    ev, start, dur, hlo_ops = _ops_line(line, idx, texts)
    mids = ev.metadata_id
    names, programs, plain = _metadata(idx)
    ops = texts.of_codes(mids, names)
    own = (hlo_ops >= 0) & np.isin(mids, list(plain))
    ops[own] = hlo_ops[own]
    columns = (_tpu_modules(idx, ev, start, texts), ops, start, dur,
               texts.of_codes(mids, programs))
    return device_step_windows(idx), columns, texts.text


def _work(space: Space) -> tuple:
    """``_read_part``'s work: the host's annotations and each device plane."""
    return device_work(space, _TPU_PLANE)


def start(space: Space) -> None:
    """Start reading the trace's parts in worker processes (``parallel.start``)."""
    parallel.start(space, _read_part, *_work(space))


def extract(space: Space) -> Columns:
    """Each plane's ``XLA Ops`` line; its events' device stats read as columns. The host's
    annotations and each device plane are read independently (in parallel where cores
    allow)."""
    work = _work(space)
    planes = work[0][1]
    annotated, *devices = parallel.in_parallel(_read_part, *work, owner=space)
    texts, parts = Texts(), []
    stepped = bool(annotated)
    for (device, _), found in zip(planes, devices):
        if found is None:
            continue
        device_steps, (modules, ops, start, dur, programs), names = found
        table = np.asarray([texts.of(t) for t in names], np.int64)
        steps = device_steps or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        stepped = stepped or bool(steps)
        step = steps.assign(start) if steps else np.zeros(len(start), dtype=np.int64)
        parts.append((table[modules], table[ops], np.full(len(start), device, np.int64), step,
                      start, dur, table[programs]))
    names = ("program", "op", "device", "step", "start_ns", "duration_ns", "program_id")
    cols = Columns(**{n: np.concatenate(c) for n, c in zip(names, zip(*parts))} if parts
                   else {})
    cols.program_names = cols.op_names = cols.program_id_names = texts.names()
    cols.stepped = stepped
    return cols


def _tpu_modules(idx: PlaneIndex, ev: Events, start: np.ndarray, texts: Texts) -> np.ndarray:
    """Each op's HLO module (``texts`` codes): an ``hlo_module`` stat on the op (its metadata,
    else the event), else the ``XLA Modules`` event enclosing it, named without its program
    id."""
    mids = ev.metadata_id
    meta = {k: idx.stats(m.stats).get("hlo_module", "")
            for k, m in idx.plane.event_metadata.items()}
    if all(meta.get(int(m)) for m in np.unique(mids)):
        return texts.of_codes(mids, meta)
    module_id = idx.stat_ids.get("hlo_module")
    if module_id is not None:  # per-event stats
        codes, st = planned_values(ev, [module_id])
        # each distinct (stat, kind) named once, in the order the events first show it
        pair = tuple_codes(codes[:, 0], mids)
        _, first = firsts(pair)
        found = [(idx.entry_value(st, i) if i >= 0 else None) or meta.get(m, "")
                 for i, m in zip(codes[first, 0].tolist(), mids[first].tolist())]
        if all(found):
            return texts.codes(found)[pair]
    enclosing = _module_windows(idx).assign(start)
    return texts.of_codes(enclosing, idx.event_names, lambda n: _MODULE_SUFFIX.sub("", n))
