"""The CPU layout: op executions on XLA's thread-pool lines of ``/host:CPU`` (`profiling.md`).

Op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal`` and ``run_id``; ``end: <op>``
markers, ``Rendezvous`` and thread-pool events are not ops. Dispatch is asynchronous, so ops are
tied to steps through ``run_id``: the host-side ``CommonPjRtLoadedExecutable::Execute`` event
inside each step annotation carries it (single-device dispatch does not: see
``_steps_by_first_op``).
"""
from __future__ import annotations

from array import array

import numpy as np

from harness.trace.planes import (
    HOST_PLANE,
    XLA_THREAD_PREFIX,
    Columns,
    PlaneIndex,
    StepWindows,
    host_steps,
    names_of,
    plane,
)
from harness.trace.xplane import XSpace


def detect(space: XSpace) -> bool:
    host = plane(space, HOST_PLANE)
    return host is not None and any(m.name == "hlo_op" for m in host.stat_metadata.values())


_UNSEEN = object()


def _stat_positions(ev, ids: tuple, idx: PlaneIndex, cols: Columns) -> tuple | None:
    """Where an op event keeps its device and run stats, or None if it is not an op.

    XLA writes an op's stats in the same order on every execution, so positions learned from
    the first event of a kind let later events read two stats instead of all of them (each read
    is checked). The op's name is its ``hlo_op`` stat, recorded once per event kind.
    """
    op_id, _, dev_id, run_id, _ = ids
    stats = list(ev.stats)
    where = {st.metadata_id: i for i, st in enumerate(stats)}
    if op_id not in where:
        return None
    cols.op_names[ev.metadata_id] = idx.value(stats[where[op_id]])
    return where.get(dev_id, -1), where.get(run_id, -1)


def _cpu_line(line, ids: tuple, idx: PlaneIndex, plans: dict, run_program: dict,
              cols: Columns) -> None:
    """Op executions of one XLA thread-pool line. The hot loop reads four fields and two stats
    per op and appends them; times are scaled per line, programs filled in per run afterwards.

    A run_id is one execution of one program, so the program (its name and id) is read once
    per run.
    """
    _, mod_id, dev_id, run_id, pid_id = ids
    offsets, durations = array("q"), array("q")
    ops, devices, runs = cols.op.append, cols.device.append, cols.runs.append
    offset, duration = offsets.append, durations.append
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
        if run not in run_program:
            by_id = {st.metadata_id: st for st in stats}
            run_program[run] = tuple(str(idx.value(by_id[k])) if k in by_id else ""
                                     for k in (mod_id, pid_id))
        ops(mid)  # named through cols.op_names
        devices(device)
        runs(run)
        offset(ev.offset_ps)
        duration(ev.duration_ps)
    base_ps = line.timestamp_ns * 1000
    cols.start_ns.extend(((base_ps + np.frombuffer(offsets, np.int64)) // 1000).tolist())
    cols.duration_ns.extend((np.frombuffer(durations, np.int64) // 1000).tolist())


def extract(space: XSpace) -> Columns:
    host = plane(space, HOST_PLANE)
    idx = PlaneIndex(host)
    ids = tuple(idx.stat_ids.get(n) for n in ("hlo_op", "hlo_module", "device_ordinal", "run_id",
                                              "program_id"))
    steps, run_step = host_steps(space, idx)
    plans: dict = {}  # event metadata id -> stat positions, or None when not an op
    run_program: dict = {}
    cols = Columns()
    for line in idx.lines(lambda name: name.startswith(XLA_THREAD_PREFIX)):
        _cpu_line(line, ids, idx, plans, run_program, cols)  # ops run on XLA's pool lines
    runs = np.frombuffer(cols.runs, np.int64)
    cols.program = names_of(runs, {r: p[0] for r, p in run_program.items()})
    cols.program_id = names_of(runs, {r: p[1] for r, p in run_program.items()})
    uniq, inverse = np.unique(runs, return_inverse=True)
    cols.stepped = bool(steps)
    if not steps:  # no annotations: each execution of a program is its own step
        cols.step = inverse
    else:
        _steps_by_first_op(uniq, inverse, np.asarray(cols.start_ns, np.int64), steps, run_step)
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
