"""The CPU layout: op executions on XLA's thread-pool lines of ``/host:CPU`` (`profiling.md`).

Op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal`` and ``run_id``; ``end: <op>``
markers, ``Rendezvous`` and thread-pool events are not ops. Dispatch is asynchronous, so ops are
tied to steps through ``run_id``: the host-side ``CommonPjRtLoadedExecutable::Execute`` event
inside each step annotation carries it (single-device dispatch does not: see
``_steps_by_first_op``).

A line is read as columns (``harness.trace.wire``): every event's metadata id, then the times
and two stats (device, run) of the op events only. XLA writes an op's stats in the same order
on every execution, so the places of the two, learned from the first event of each kind, are
read directly (each read checked: an event laid out otherwise has all its stats read).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.trace import parallel
from harness.trace.planes import (
    HOST_PLANE,
    XLA_THREAD_PREFIX,
    Columns,
    PlaneIndex,
    StepWindows,
    firsts,
    host_steps,
    plane,
)
from harness.trace.space import Space
from harness.trace.wire import INT64, UINT64, Events, Line, Stats, read_line

STATS = ("hlo_op", "hlo_module", "device_ordinal", "run_id", "program_id")


def detect(space: Space) -> bool:
    host = plane(space, HOST_PLANE)
    return host is not None and "hlo_op" in host.stat_ids


@dataclass
class _Plans:
    """Per event kind (metadata id): whether its events are ops, and the places of their
    device and run stats (-1: the first event of the kind had none); learned from the first
    event of each kind, in line order. ``op_names``: each op kind's ``hlo_op``."""

    kinds: dict = field(default_factory=dict)  # kind -> (device place, run place) or None
    op_names: dict = field(default_factory=dict)

    def learn(self, line: Line, ids: dict, idx: PlaneIndex) -> None:
        mids = line.metadata_id
        unseen = np.flatnonzero(~np.isin(mids, list(self.kinds))) if self.kinds else None
        if unseen is not None and not len(unseen):
            return
        kinds, first = firsts(mids if unseen is None else mids[unseen])
        ev = line.events(first if unseen is None else unseen[first])
        st = ev.stats()
        n = len(ev)
        begins = np.searchsorted(st.row, np.arange(n))  # each event's first entry
        op, dev, run = (st.entry(ids[k], n) for k in ("hlo_op", "device_ordinal", "run_id"))
        # the place of the last stat of each id, as a dict of them by id keeps the last
        dev, run = np.where(dev >= 0, dev - begins, -1), np.where(run >= 0, run - begins, -1)
        for kind, o, d, r in zip(kinds.tolist(), op.tolist(), dev.tolist(), run.tolist()):
            if o < 0:
                self.kinds[kind] = None
                continue
            self.op_names[kind] = idx.entry_value(st, o)
            self.kinds[kind] = (d, r)

    def places(self, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each event is an op, the device and run places of each op, (n, 2))."""
        ops = {k: v for k, v in self.kinds.items() if v is not None}
        keys = np.asarray(sorted(ops), np.int64)
        if not len(keys):
            return np.zeros(len(kinds), bool), np.zeros((0, 2), np.int64)
        plans = np.asarray([ops[k] for k in keys.tolist()], np.int64)
        if keys[0] >= 0 and keys[-1] < 1 << 24:  # ids as writers number them: a lookup table
            row = np.full(int(keys[-1]) + 2, -1, np.int64)  # the last one: -1 for the rest
            row[keys] = np.arange(len(keys))
            at = row[np.clip(kinds, -1, len(row) - 1)]
        else:
            at = np.searchsorted(keys, kinds)
            at = np.where(keys[np.minimum(at, len(keys) - 1)] == kinds, at, -1)
        is_op = at >= 0
        return is_op, plans[at[is_op]]


def _ints(stats: Stats, entry: np.ndarray) -> np.ndarray:
    """The integer value of each entry (-1: none); an entry of another kind reads 0, as the
    int64 and uint64 fields of a stat holding something else do."""
    out = np.full(len(entry), -1, np.int64)
    has = entry >= 0
    e = entry[has]
    out[has] = np.where(np.isin(stats.kind[e], (INT64, UINT64)), stats.value[e], 0)
    return out


def _device_and_run(ev: Events, places: np.ndarray, ids: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each op event's device and run: the stats at the planned places, checked; an event
    laid out otherwise has all its stats read (the last of an id wins; -1: it has none)."""
    dev_id, run_id = ids["device_ordinal"], ids["run_id"]
    value, found = ev.planned_ints(places, [dev_id, run_id])
    device, run = value[:, 0], value[:, 1]
    odd = np.flatnonzero(~found.all(axis=1))
    if len(odd):
        every = ev.stats(odd, [dev_id, run_id])
        device[odd] = _ints(every, every.entry(dev_id, len(ev))[odd])
        run[odd] = _ints(every, every.entry(run_id, len(ev))[odd])
    return device, run


@dataclass
class _LineOps:
    """One line's op executions (op kind, device, run, start ns, duration ns), the plans it was
    read with (those of the kinds it holds) and each of its runs' program (name, id), from the
    run's first op event in the line."""

    columns: tuple
    plans: dict
    op_names: dict
    programs: dict


def _cpu_line(line: Line, ids: dict, idx: PlaneIndex, plans: _Plans) -> _LineOps:
    """The op executions of one XLA thread-pool line, read with ``plans`` (learning the kinds
    they do not know yet). A run_id is one execution of one program, so the program (its name
    and id) is read once per run."""
    plans.learn(line, ids, idx)
    is_op, places = plans.places(line.metadata_id)
    ev = line.events(np.flatnonzero(is_op))
    device, run = _device_and_run(ev, places, ids)
    runs, rows = firsts(run)
    st = ev.stats(rows, [ids["hlo_module"], ids["program_id"]])
    module, program_id = (idx.entry_texts(st, st.entry(ids[k], len(ev))[rows])
                          for k in ("hlo_module", "program_id"))
    programs = dict(zip(runs.tolist(), zip(module, program_id)))
    held = np.unique(line.metadata_id).tolist()  # the kinds this line holds
    # op kinds and devices are small numbers: half the bytes to send back and join
    op = ev.metadata_id.astype(np.int32) if len(ev) and ev.metadata_id.max() < 2**31 else (
        ev.metadata_id)
    return _LineOps((op, device.astype(np.int32), run, ev.start_ns, ev.duration_ns),
                    {k: plans.kinds[k] for k in held},
                    {k: plans.op_names[k] for k in held if k in plans.op_names}, programs)


def _read_line(context, ref) -> _LineOps:
    """One line read on its own (in a worker process, maybe): its kinds planned from their
    first events in this line."""
    ids, idx = context
    return _cpu_line(read_line(ref.raw()), ids, idx, _Plans())


def _work(space: Space) -> tuple:
    """The context, parts and size of ``_read_line``'s work: (stat ids, the host plane's
    index), its XLA thread-pool lines, their bytes."""
    idx = PlaneIndex(plane(space, HOST_PLANE))
    ids = {name: idx.stat_ids.get(name) for name in STATS}
    refs = idx.refs(lambda name: name.startswith(XLA_THREAD_PREFIX))
    return (ids, idx), refs, sum(r.size for r in refs)


def start(space: Space) -> None:
    """Start reading the thread-pool lines in worker processes (``parallel.start``)."""
    parallel.start(space, _read_line, *_work(space))


def extract(space: Space) -> Columns:
    """The op executions of every XLA thread-pool line. Lines are read independently (in
    parallel where cores allow); a kind's plan is the one learned from its first event in
    line order, and a line read with another plan for a kind it holds is read again with it."""
    (ids, idx), refs, size = _work(space)
    steps, run_step = host_steps(space, idx)
    lines = parallel.in_parallel(_read_line, (ids, idx), refs, size, owner=space)
    plans, run_program = _Plans(), {}
    for part in lines:
        for kind, plan in part.plans.items():
            plans.kinds.setdefault(kind, plan)
        for kind, name in part.op_names.items():
            plans.op_names.setdefault(kind, name)
    for i, part in enumerate(lines):
        if any(plans.kinds[k] != plan for k, plan in part.plans.items()):
            lines[i] = part = _cpu_line(read_line(refs[i].raw()), ids, idx, plans)
        for run, program in part.programs.items():
            run_program.setdefault(run, program)
    empty = np.zeros(0, np.int64)
    kinds, device, runs, start, duration = (np.concatenate(c) for c in zip(
        *(part.columns for part in lines))) if lines else (empty,) * 5
    cols = Columns(op=kinds, device=device, start_ns=start, duration_ns=duration,
                   op_names=plans.op_names)
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
