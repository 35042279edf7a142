"""The GPU format: planes ``/device:GPU:<n>``, kernel events on per-stream lines.

A kernel carries ``hlo_op`` / ``hlo_module`` stats; consecutive kernels of one HLO op fold into
one execution whose duration is the sum of its kernels'. Steps come from a ``Steps`` line, else
from the host's step annotations.

Kernels inside CUDA graphs (XLA's command buffers) carry the graph's op; they are attributed
to HLO ops from the program's schedule by ``harness.trace.graphs``. A device's events are read
as columns (``harness.trace.wire``), its kernels folded with numpy (``_runs``).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.trace import parallel
from harness.trace.codes import Texts, firsts, tuple_codes
from harness.trace.graphs import MEMSET, Kernel, attribute, schedule
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
from harness.trace.wire import INT64, REF, UINT64

_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_NON_KERNEL_LINES = {"XLA Modules", "XLA Ops", "Steps", "Launch Stats", "Framework Name Scope",
                     "Framework Ops", "Source code", "TensorFlow Name Scope"}
GRAPH_STAT = "cuda_graph_id"


def detect(space: Space) -> bool:
    return any("hlo_op" in p.stat_ids for _, p in device_planes(space, _GPU_PLANE))


@dataclass
class Kernels:
    """One device's kernels as columns, in start order: ``module``, ``op``, ``program_id`` and
    ``name`` are ``Texts`` codes; ``in_graph``: launched inside a CUDA graph."""

    start: np.ndarray
    dur: np.ndarray
    module: np.ndarray
    op: np.ndarray
    name: np.ndarray
    in_graph: np.ndarray
    program_id: np.ndarray

    def take(self, order: np.ndarray) -> Kernels:
        return Kernels(*(getattr(self, f)[order] for f in self.__dataclass_fields__))

    def recode(self, table: np.ndarray) -> Kernels:
        """The kernels with their names' codes ``c`` made ``table[c]`` (another ``Texts``)."""
        return Kernels(self.start, self.dur, table[self.module], table[self.op],
                       table[self.name], self.in_graph, table[self.program_id])

    def as_list(self, texts: Texts) -> list[Kernel]:
        t = texts.text
        return [Kernel(s, d, t[m], t[o], t[n], bool(g), t[p]) for s, d, m, o, n, g, p in zip(
            *(getattr(self, f).tolist() for f in self.__dataclass_fields__))]

    @classmethod
    def of_list(cls, kernels: list[Kernel], texts: Texts) -> Kernels:
        return cls(np.asarray([k.start for k in kernels], np.int64),
                   np.asarray([k.dur for k in kernels], np.int64),
                   texts.codes(k.module for k in kernels), texts.codes(k.op for k in kernels),
                   texts.codes(k.name for k in kernels),
                   np.asarray([k.in_graph for k in kernels], bool),
                   texts.codes(k.program_id for k in kernels))


def _stat_texts(idx: PlaneIndex, st, entry: np.ndarray, texts: Texts) -> np.ndarray:
    """The ``Texts`` code of each entry's value as ``str()`` prints it (0, "": none): a
    ``REF`` names a stat, a ``STR`` is itself, a number is printed; each distinct value
    printed once."""
    out = np.zeros(len(entry), np.int64)
    has = np.flatnonzero(entry >= 0)
    e = entry[has]
    kind, value = st.kind[e], st.value[e]
    varint = np.isin(kind, (REF, INT64, UINT64))
    pair = tuple_codes(kind[varint], value[varint])
    _, first = firsts(pair)
    shown = [idx.stat_names.get(v, "") if k == REF else str(v % 2**64 if k == UINT64 else v)
             for k, v in zip(kind[varint][first].tolist(), value[varint][first].tolist())]
    out[has[varint]] = np.asarray([texts.of(t) for t in shown] or [0], np.int64)[pair]
    for i in np.flatnonzero(~varint).tolist():  # strings and doubles: rare on kernel events
        out[has[i]] = texts.of(str(idx.entry_value(st, int(e[i]))))
    return out


def _kernels(idx: PlaneIndex, texts: Texts) -> Kernels:
    """The kernels of a device plane: events with an ``hlo_op`` (theirs, else their
    metadata's), in start order."""
    ids = [idx.stat_ids.get(n) for n in ("hlo_op", "hlo_module", "program_id", GRAPH_STAT)]
    meta_op = {k: str(idx.stats(m.stats).get("hlo_op") or "")
               for k, m in idx.plane.event_metadata.items()}
    parts = []
    for line in idx.lines(lambda name: name not in _NON_KERNEL_LINES):
        ev = line.events()
        # each event's op, module, program id and graph, as codes of the distinct values
        codes, values = planned_values(ev, ids)
        shown = np.append(_stat_texts(idx, values, np.arange(len(values)), texts), 0)
        op, module, program_id = (shown[codes[:, j]] for j in range(3))  # -1: the 0 after
        # the event's own op, else its metadata's (an empty op counts as none)
        mids = ev.metadata_id
        for mid in np.unique(mids[op == 0]).tolist():
            op[(op == 0) & (mids == mid)] = texts.of(meta_op.get(mid, ""))
        keep = op != 0
        names = texts.of_codes(mids, idx.event_names)
        parts.append(Kernels(ev.start_ns[keep], ev.duration_ns[keep], module[keep], op[keep],
                             names[keep], (codes[:, 3] >= 0)[keep], program_id[keep]))
    if not parts:
        return Kernels(*(np.zeros(0, np.int64),) * 5, np.zeros(0, bool), np.zeros(0, np.int64))
    every = Kernels(*(np.concatenate([getattr(p, f) for p in parts])
                      for f in Kernels.__dataclass_fields__))
    return every.take(np.argsort(every.start, kind="stable"))


def _read_part(context, part):
    """One part of a GPU trace, read on its own (in a worker process, maybe): the host's step
    annotations (part None), or a device plane's steps and kernels (their names coded by a
    table of its own, returned with them)."""
    space, planes = context
    if part is None:
        return host_steps(space)[0]
    idx, texts = PlaneIndex(planes[part][1]), Texts()
    return device_step_windows(idx), _kernels(idx, texts), texts.text


def _work(space: Space) -> tuple:
    """``_read_part``'s work: the host's annotations and each device plane."""
    return device_work(space, _GPU_PLANE)


def start(space: Space) -> None:
    """Start reading the trace's parts in worker processes (``parallel.start``)."""
    parallel.start(space, _read_part, *_work(space))


def extract(space: Space,
            schedule_of: Callable[[str], Sequence[tuple[str, str, str]] | None] | None = None
            ) -> Columns:
    """The GPU op executions; ``schedule_of(program)``: that program's ops in order, (name,
    opcode, computation) each (``harness.hlo.schedule``), for kernels inside CUDA graphs. The
    host's annotations and each device plane are read independently (in parallel where cores
    allow)."""
    work = _work(space)
    planes = work[0][1]
    annotated, *devices = parallel.in_parallel(_read_part, *work, owner=space)
    texts, parts = Texts(), []
    sched, stepped = None, bool(annotated)
    for (device, _), (device_steps, kernels, names) in zip(planes, devices):
        kernels = kernels.recode(np.asarray([texts.of(t) for t in names], np.int64))
        steps = device_steps or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        stepped = stepped or bool(steps)
        if kernels.in_graph.any():
            if sched is None:
                program = texts.text[kernels.module[np.argmax(kernels.in_graph)]]
                sched = schedule(schedule_of(program) if schedule_of else None)
            every = kernels.as_list(texts)
            attribute(every, sched)
            kernels = Kernels.of_list(every, texts)
        parts.append(_fold(kernels, steps, device, texts))
    names = ("program", "op", "device", "step", "start_ns", "duration_ns", "program_id")
    cols = Columns(**{n: np.concatenate(c) for n, c in zip(names, zip(*parts))} if parts
                   else {})
    cols.program_names = cols.op_names = cols.program_id_names = texts.names()
    cols.stepped = stepped
    cols.async_names = _async_names(space)
    return cols


def _fold(kernels: Kernels, steps: StepWindows, device: int, texts: Texts) -> tuple:
    """One execution per run of consecutive kernels of one op; a memset (a library clearing its
    output first) joins the next kernel of its op even when another stream's kernel started
    in between. A kernel the run already holds starts a new execution: the op ran again (a
    program of one op called twice in a row), not another of its kernels.

    Returns the executions' columns: (program, op, device, step, start ns, duration ns,
    program id), codes of ``texts`` where they are names."""
    k = kernels
    step = steps.assign(k.start) if steps else np.zeros(len(k.start), np.int64)
    key = tuple_codes(k.module, k.program_id, k.op, step)
    memset = np.asarray([t.startswith(MEMSET) for t in texts.text])[k.name]
    first, dur = _runs(key, k.name, k.in_graph, memset, k.dur)
    return (k.module[first], k.op[first], np.full(len(first), device, np.int64), step[first],
            k.start[first], dur, k.program_id[first])


def _runs(key: np.ndarray, name: np.ndarray, in_graph: np.ndarray, memset: np.ndarray,
          dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_fold``'s rule over kernels in start order: (the first kernel of each execution, its
    summed duration), found with numpy (``_runs_at_once``) where the rule's corner cases are
    absent, else kernel by kernel (``_runs_in_turn``)."""
    found = _runs_at_once(key, name, in_graph, memset)
    if found is None:
        return _runs_in_turn(key, name, in_graph, memset, dur)
    first, row = found
    return first, np.bincount(row, weights=dur, minlength=len(first)).astype(np.int64)


def _runs_at_once(key, name, in_graph, memset) -> tuple[np.ndarray, np.ndarray] | None:
    """(the first kernel of each execution, each kernel's execution) by the rule of
    ``_runs_in_turn``, or None where it cannot be settled at once.

    A memset that starts an execution is joined by the next kernel of its key (its consumer);
    leaving consumers out, an execution starts wherever the key changes. Which memsets start
    one depends on which kernels are consumers: settled by repeating the two until they agree.
    Then no kernel may join an execution that already ran its name (the rule would start a new
    one there: "the op ran again"); where one would, None."""
    n = len(key)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(key, kind="stable")
    following = np.full(n, -1, np.int64)  # the next kernel of the same key
    same = key[order[1:]] == key[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    starts_memset = memset.copy()
    for _ in range(8):
        owner = np.full(n, -1, np.int64)
        waiting = np.flatnonzero(starts_memset & (following >= 0))
        owner[following[waiting]] = waiting
        rest = np.flatnonzero(owner < 0)
        change = np.ones(len(rest), bool)
        change[1:] = key[rest[1:]] != key[rest[:-1]]
        start = np.zeros(n, bool)
        start[rest[change]] = True
        if np.array_equal(memset & start, starts_memset):
            break
        starts_memset = memset & start
    else:
        return None
    execution = np.cumsum(start) - 1  # kernels since the last start: its execution so far
    row = execution.copy()
    consumer = owner >= 0
    row[consumer] = execution[owner[consumer]]
    # the "ran again" rule: a kernel that joins by its key, out of graphs, whose name a kernel
    # since the last start already had
    joins = ~start & ~consumer & ~in_graph
    if joins.any():
        seen = np.lexsort((np.arange(n), name, execution))
        repeat = np.zeros(n, bool)
        repeat[seen[1:]] = ((execution[seen[1:]] == execution[seen[:-1]]) &
                            (name[seen[1:]] == name[seen[:-1]]))
        if (repeat & joins).any():
            return None
    return np.flatnonzero(start), row


def _runs_in_turn(key: np.ndarray, name: np.ndarray, in_graph: np.ndarray, memset: np.ndarray,
                  dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_fold``'s rule, one kernel at a time: (the first kernel of each execution, its summed
    duration). Kernels of one execution are consecutive, but for a memset's."""
    first, total = [], []
    prev, waiting_for, launched = -1, {}, set()
    for i, (kk, n, g, m, d) in enumerate(zip(key.tolist(), name.tolist(), in_graph.tolist(),
                                             memset.tolist(), dur.tolist())):
        waiting = waiting_for.pop(kk, None)  # this op's memset, waiting for its kernel
        # (kernels inside a CUDA graph are placed by the schedule: no such evidence there)
        again = kk == prev and n in launched and not g
        if (kk == prev and not again) or waiting is not None:  # a kernel of this execution
            total[len(total) - 1 if kk == prev else waiting] += d
            launched.add(n)
            continue
        first.append(i)
        total.append(d)
        launched = {n}
        if m:
            waiting_for[kk] = len(total) - 1
        prev = kk
    return np.asarray(first, np.int64), np.asarray(total, np.int64)


def _async_names(space: Space) -> dict[str, str]:
    # imported here: hlo_proto imports harness.hlo, and with it pandas, which the decode path
    # must not import before its workers fork (harness.trace.parallel)
    from harness.trace.hlo_proto import async_names, embedded_modules

    names = {}
    for module_bytes in embedded_modules(space).values():
        names.update(async_names(module_bytes))
    return names
