"""The CPU format: op executions on the lines of ``/host:CPU`` (`profiling.md`).

Op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal`` and ``run_id``; ``end: <op>``
markers, ``Rendezvous`` and thread-pool events are not ops. Most run on XLA's thread-pool lines
(``tf_*``), where an event is an op as its kind's first event says (``_Kinds``); XLA:CPU runs a
small program (an f32 cache update on one device) inline on the thread that called it, the
user's Python thread, so that thread's line holds its ops too, among the caller's own events
(``Execute``, annotations, Python frames): there an event is an op where it carries an
``hlo_op`` stat itself (``_caller_ops``). The markers say when each op's work
completed: an op XLA runs asynchronously (an Eigen matmul) lasts from its start to its
completion, not only its event (``harness.trace.completions``). Dispatch is asynchronous, so ops are
tied to steps through ``run_id``: the host-side ``CommonPjRtLoadedExecutable::Execute`` event
inside each step annotation carries it (single-device dispatch does not: see
``_steps_by_first_op``).

A line is read as columns (``harness.trace.wire``): every event's metadata id, then the times
and three stats (device, run, flow id) of the op events only, read where each op kind lays its
stats out (``harness.trace.statplans``: every stat record of every op event checked), and where
the line holds completion markers, every event's times and the markers' flow ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.trace import completions, parallel
from harness.trace.codes import firsts
from harness.trace.planes import (
    HOST_PLANE,
    XLA_THREAD_PREFIX,
    Columns,
    PlaneIndex,
    StepWindows,
    host_steps,
    plane,
)
from harness.trace.space import Space
from harness.trace.statplans import planned_values
from harness.trace.wire import INT64, UINT64, Events, Line, Stats, read_line

STATS = ("hlo_op", "hlo_module", "device_ordinal", "run_id", "program_id", "_p", "_c")


def detect(space: Space) -> bool:
    host = plane(space, HOST_PLANE)
    return host is not None and "hlo_op" in host.stat_ids


@dataclass
class _Kinds:
    """Per event kind (metadata id): whether its events are ops, as the kind's first event (in
    line order) says by having an ``hlo_op`` stat; ``op_names``: each op kind's ``hlo_op``."""

    is_op: dict = field(default_factory=dict)
    op_names: dict = field(default_factory=dict)

    def learn(self, line: Line, ids: dict, idx: PlaneIndex) -> None:
        mids = line.metadata_id
        unseen = np.flatnonzero(~np.isin(mids, list(self.is_op))) if self.is_op else None
        if unseen is not None and not len(unseen):
            return
        kinds, first = firsts(mids if unseen is None else mids[unseen])
        ev = line.events(first if unseen is None else unseen[first])
        st = ev.stats(ids=[ids["hlo_op"]])
        op = st.entry(ids["hlo_op"], len(ev))
        for kind, o in zip(kinds.tolist(), op.tolist()):
            self.is_op[kind] = o >= 0
            if o >= 0:
                self.op_names[kind] = idx.entry_value(st, o)

    def ops(self, kinds: np.ndarray) -> np.ndarray:
        """Whether each event (of ``kinds``, all learned) is an op."""
        return np.isin(kinds, np.asarray([k for k, op in self.is_op.items() if op], np.int64))


def _ints(stats: Stats, entry: np.ndarray) -> np.ndarray:
    """The integer value of each entry (-1: none); an entry of another kind reads 0, as the
    int64 and uint64 fields of a stat holding something else do."""
    out = np.full(len(entry), -1, np.int64)
    has = entry >= 0
    e = entry[has]
    out[has] = np.where(np.isin(stats.kind[e], (INT64, UINT64)), stats.value[e], 0)
    return out


def _op_stats(ev: Events, ids: dict) -> tuple[np.ndarray, ...]:
    """Each op event's device, run and flow id (``_p``, and whether it has one): its last stat
    of each id, read by the layouts of the op kinds (``planned_values``: every stat record
    checked; -1: it has none)."""
    codes, values = planned_values(ev, [ids["device_ordinal"], ids["run_id"], ids["_p"]])
    return (_ints(values, codes[:, 0]), _ints(values, codes[:, 1]), _ints(values, codes[:, 2]),
            codes[:, 2] >= 0)


def _marks(line: Line, ids: dict, marking: tuple) -> tuple[np.ndarray, ...]:
    """The completion markers of a line (``harness.trace.completions``): each one's flow id
    (``_c``), time, and the start, end and kind (a run or not) of the event its thread
    recorded last before it (``completions.prior``)."""
    rows = np.flatnonzero(np.isin(line.metadata_id, marking[0]))
    if not len(rows):
        return (np.zeros(0, np.int64),) * 4 + (np.zeros(0, bool),)
    every = line.events()
    start = every.start_ns
    codes, values = planned_values(line.events(rows), [ids["_c"]])
    has = codes[:, 0] >= 0
    before = completions.prior(every.metadata_id, start, start + every.duration_ns, rows,
                               marking[1])
    return (_ints(values, codes[:, 0])[has], start[rows][has], *(b[has] for b in before))


@dataclass
class _LineOps:
    """One line's op executions (op kind, device, run, start ns, duration ns, flow id and
    whether it has one), which of the kinds it holds it read as ops, each of its runs' program
    (name, id), from the run's first op event in the line, and its completion markers
    (``_marks``)."""

    columns: tuple
    is_op: dict
    op_names: dict
    programs: dict
    marks: tuple


def _caller_ops(line: Line, ids: dict, idx: PlaneIndex) -> tuple[Events, dict]:
    """The op events of a line not XLA's pool's (the caller's: module docstring), those with
    an ``hlo_op`` stat of their own (of the events whose bytes may hold one, ``Line.holding``,
    read where their kinds lay it out, ``planned_values``), and each of their kinds' op name
    (its first op event's ``hlo_op``)."""
    if ids["hlo_op"] is None:
        return line.events(np.zeros(0, np.int64)), {}
    ev = line.events(line.holding(ids["hlo_op"]))
    codes, values = planned_values(ev, [ids["hlo_op"]])
    op = codes[:, 0] >= 0
    kinds, first = firsts(ev.metadata_id[op])
    names = {k: idx.entry_value(values, e) for k, e in
             zip(kinds.tolist(), codes[op, 0][first].tolist())}
    return line.events(ev.index[op]), names


def _cpu_line(line: Line, ids: dict, idx: PlaneIndex, kinds: _Kinds, marking: tuple,
              pool: bool = True) -> _LineOps:
    """The op executions of one line: of an XLA thread-pool line (``pool``), its op kinds
    those of ``kinds`` (learning the kinds it does not know yet); of another, the events that
    carry an ``hlo_op`` (``_caller_ops``: it tells ``kinds`` nothing). A run_id is one
    execution of one program, so the program (its name and id) is read once per run."""
    if pool:
        kinds.learn(line, ids, idx)
        ev = line.events(np.flatnonzero(kinds.ops(line.metadata_id)))
        is_op, op_names = kinds.is_op, kinds.op_names
        held = np.unique(line.metadata_id).tolist()  # the kinds this line holds
    else:
        ev, op_names = _caller_ops(line, ids, idx)
        is_op, held = {}, list(op_names)
    device, run, flow, has_flow = _op_stats(ev, ids)
    runs, rows = firsts(run)
    st = ev.stats(rows, [ids["hlo_module"], ids["program_id"]])
    module, program_id = (idx.entry_texts(st, st.entry(ids[k], len(ev))[rows])
                          for k in ("hlo_module", "program_id"))
    programs = dict(zip(runs.tolist(), zip(module, program_id)))
    # op kinds and devices are small numbers: half the bytes to send back and join
    op = ev.metadata_id.astype(np.int32) if len(ev) and ev.metadata_id.max() < 2**31 else (
        ev.metadata_id)
    return _LineOps((op, device.astype(np.int32), run, ev.start_ns, ev.duration_ns, flow,
                     has_flow), {k: is_op[k] for k in held if k in is_op},
                    {k: op_names[k] for k in held if k in op_names}, programs,
                    _marks(line, ids, marking))


def _pool(ref) -> bool:
    """Whether a line is one of XLA's thread pool's."""
    return ref.name.startswith(XLA_THREAD_PREFIX)


def _read_line(context, ref) -> _LineOps:
    """One line read on its own (in a worker process, maybe): its op kinds those whose first
    event in this line is an op."""
    ids, idx, marking = context
    return _cpu_line(read_line(ref.raw()), ids, idx, _Kinds(), marking, _pool(ref))


def _work(space: Space) -> tuple:
    """The context, parts and size of ``_read_line``'s work: (stat ids, the host plane's
    index, its completion markers' and continuations' kinds), its lines (every one: the
    caller's may hold ops, module docstring), their bytes."""
    idx = PlaneIndex(plane(space, HOST_PLANE))
    ids = {name: idx.stat_ids.get(name) for name in STATS}
    refs = idx.refs()
    return (ids, idx, completions.kinds(idx.event_names)), refs, sum(r.size for r in refs)


def start(space: Space) -> None:
    """Start reading the host's lines in worker processes (``parallel.start``)."""
    parallel.start(space, _read_line, *_work(space))


def extract(space: Space) -> Columns:
    """The op executions of every line of the host. Lines are read independently (in
    parallel where cores allow); on the thread-pool lines a kind is an op or not as its first
    event among theirs, in line order, says, and a line that read a kind it holds otherwise
    is read again (a caller's line tells no kind, ``_cpu_line``)."""
    (ids, idx, marking), refs, size = _work(space)
    steps, run_step = host_steps(space, idx)
    lines = parallel.in_parallel(_read_line, (ids, idx, marking), refs, size, owner=space)
    kinds, run_program = _Kinds(), {}
    for part in lines:
        for kind, op in part.is_op.items():
            kinds.is_op.setdefault(kind, op)
        for kind, name in part.op_names.items():
            kinds.op_names.setdefault(kind, name)
    for i, part in enumerate(lines):
        if any(kinds.is_op[k] != op for k, op in part.is_op.items()):
            lines[i] = part = _cpu_line(read_line(refs[i].raw()), ids, idx, kinds, marking)
        for run, program in part.programs.items():
            run_program.setdefault(run, program)
    empty = np.zeros(0, np.int64)
    op, device, runs, start, duration, flow, has_flow = (np.concatenate(c) for c in zip(
        *(part.columns for part in lines))) if lines else (empty,) * 7
    marks = ((np.concatenate(c) for c in zip(*(part.marks for part in lines))) if lines
             else (empty,) * 4 + (np.zeros(0, bool),))
    duration = completions.durations(start, duration, flow, has_flow.astype(bool), *marks)
    cols = Columns(op=op, device=device, start_ns=start, duration_ns=duration,
                   op_names=kinds.op_names)
    cols.program, cols.program_id = runs, runs
    cols.program_names = {r: p[0] for r, p in run_program.items()}
    cols.program_id_names = {r: p[1] for r, p in run_program.items()}
    import pandas as pd  # here, not above: decode workers are forked before pandas is imported

    inverse, uniq = pd.factorize(runs, sort=True)
    cols.stepped = bool(steps)
    if not steps:  # no annotations: each execution of a program is its own step
        cols.step = inverse
    else:
        _steps_by_first_op(uniq, inverse, start, steps, run_step)
        cols.step = np.asarray([run_step.get(int(r), -1) for r in uniq], np.int64)[inverse]
    return cols


def _steps_by_first_op(runs: np.ndarray, inverse: np.ndarray, start_ns: np.ndarray,
                       steps: StepWindows, run_step: dict) -> None:
    """Tie runs no ``Execute`` event names (single-device dispatch carries no run_id) to the
    step whose annotation last opened before the run's first op; runs before any step stay out.
    ``runs``: the distinct run ids, ``inverse``: each op's index into them.
    """
    unnamed = np.asarray([int(r) not in run_step for r in runs], bool)
    if not unnamed.any():
        return
    first = np.full(len(runs), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, inverse, start_ns)
    opened = StepWindows(zip(steps.starts, steps.ends, steps.steps), open_ended=True)
    for run, step in zip(runs[unnamed].tolist(), opened.assign(first[unnamed]).tolist()):
        run_step[run] = step
