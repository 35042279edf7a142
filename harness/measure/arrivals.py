"""Arrivals at collectives: when each device entered a collective, and how long it waited there.

A collective finishes on no device before the last one of its group has arrived: a device that
enters early waits, its thread blocked in the rendezvous. Each execution of a collective on each
device (``schema.ARRIVALS``) has its arrival (``arrive_ns``: the device's event start), the last
arrival of its group (``last_arrive_ns``), its end and the wait between the two arrivals
(``wait_ns = last_arrive_ns - arrive_ns``, never negative). On a host whose devices share cores
(``harness.measure.shares``) the wait is not running: only the time after the last arrival
counts.

Executions are matched across devices by their order: the k-th execution of an op in a step on
one device is the k-th on every other (``schema.EXECUTION``). Its group is every device that ran
it, or, where ``groups`` names an op's replica groups (device ids), the devices of the device's
own group: the trace's events do not say which devices a collective links.

Arrivals compare on one clock. The devices of one host share it; those of two hosts do not, so
without ``clock_offsets_ns`` a device's last arrival is the last on its own host. With them
(host -> ns to add to that host's times to put them on a common clock), the group's devices on
every host compare, and ``last_arrive_ns`` is given back on the device's own host's clock.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from harness import schema
from harness.measure import grouping
from harness.measure.ops import as_text, named
from predictions.rules import ASYNC_PAIRS, COLLECTIVE_OPCODES

# Opcodes whose thread waits for its group: the collectives and the -start of an async one
# (its -done waits for the transfer, not for the other devices to arrive)
RENDEZVOUS = frozenset({*COLLECTIVE_OPCODES, *(
    s for s in ASYNC_PAIRS if s.removesuffix("-start") in COLLECTIVE_OPCODES)})

Groups = Mapping[str, Sequence[Collection[int]]]


def opcode_of_name(op: str) -> str:
    """``all-gather-start.3`` -> ``all-gather-start``: the opcode a name without HLO implies."""
    head, _, tail = op.rpartition(".")
    return head if head and tail.isdigit() else op


def collective_ops(names: Iterable[str], opcodes: Mapping[str, str] | None = None) -> set[str]:
    """The names (of ops) whose threads wait for their group: their opcode, from ``opcodes``
    (op name -> HLO opcode) where it names them, else as the name implies, in RENDEZVOUS."""
    opcodes = opcodes or {}
    return {n for n in map(str, names) if opcodes.get(n, opcode_of_name(n)) in RENDEZVOUS}


def named_collectives(events: pd.DataFrame) -> set[str]:
    """The ops of EVENTS whose names say they are collectives (``collective_ops``)."""
    op = events[schema.OP]
    names = (op.cat.categories if isinstance(op.dtype, pd.CategoricalDtype) else op.unique())
    return collective_ops(names)


def replica_groups(module) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Op name -> its device groups, for each collective of ``module`` (``harness.hlo.Module``)
    that names more than one: explicit and iota groups as printed, mesh groups expanded over
    whole mesh axes (ids row-major over the mesh, as XLA numbers them; a group over part of an
    axis is left out). Ids are the program's logical device ids, which are the trace's where
    the mesh lists its devices in order (jax's CPU devices)."""
    out = {}
    for comp in module.computations.values():
        for instr in comp.instructions:
            found = instr.attrs.get("replica_groups")
            if instr.opcode in RENDEZVOUS and found is not None and not isinstance(found, str) \
                    and (found.num_groups or 1) > 1:
                groups = found.groups if found.kind != "mesh" else _mesh_groups(found)
                if groups:
                    out[instr.name] = tuple(tuple(int(d) for d in g) for g in groups)
    return out


def _mesh_groups(found) -> tuple[tuple[int, ...], ...] | None:
    names = [name for name, _ in found.mesh]
    if any(axis not in names for axis in found.axes):
        return None
    ids = np.arange(int(np.prod([n for _, n in found.mesh]))).reshape([n for _, n in found.mesh])
    at = [names.index(axis) for axis in found.axes]
    ids = np.moveaxis(ids, at, list(range(len(names) - len(at), len(names))))
    return tuple(map(tuple, ids.reshape(-1, found.group_size).tolist()))


def arrivals(events: pd.DataFrame, collectives: Collection[str] | None = None,
             groups: Groups | None = None,
             clock_offsets_ns: Mapping[int, int] | None = None) -> pd.DataFrame:
    """The ARRIVALS table of EVENTS (module docstring): one row per execution of a collective
    on a device, in the events' order, indexed by the events' index. ``collectives``: the op
    names that are collectives (``collective_ops``; default: as their names imply);
    ``groups``: op name -> its replica groups as device ids (default: every device that ran
    the execution); ``clock_offsets_ns``: host -> offset to a common clock (default: none,
    hosts compared apart)."""
    schema.validate(events, schema.EVENTS, where="arrivals(events)")
    op = events[schema.OP]
    if collectives is None:
        collectives = named_collectives(events)
    ev = events[named(op, set(map(str, collectives)))]
    last, execution, host = last_arrivals(ev, groups, clock_offsets_ns)
    start = ev[schema.START_NS].to_numpy(np.int64)
    out = pd.DataFrame({
        schema.PROGRAM: as_text(ev[schema.PROGRAM]),
        schema.PROGRAM_ID: (as_text(ev[schema.PROGRAM_ID]) if schema.PROGRAM_ID in ev.columns
                            else ""),
        schema.OP: as_text(ev[schema.OP]), schema.STEP: ev[schema.STEP].to_numpy(),
        schema.EXECUTION: execution, schema.HOST: host,
        schema.DEVICE: ev[schema.DEVICE].to_numpy(), schema.ARRIVE_NS: start,
        schema.LAST_ARRIVE_NS: last,
        schema.END_NS: start + ev[schema.DURATION_NS].to_numpy(np.int64),
        schema.WAIT_NS: last - start}, index=ev.index)
    return out[list(schema.ARRIVALS)]


def last_arrivals(ev: pd.DataFrame, groups: Groups | None = None,
                  clock_offsets_ns: Mapping[int, int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row of ``ev`` (EVENTS of collectives only): the last arrival of its execution's
    group (on the row's host's clock, never before the row's own start), the execution's number
    in the step on its device, and the row's host (0 where the table has no HOST column)."""
    n = len(ev)
    start = ev[schema.START_NS].to_numpy(np.int64)
    host = (ev[schema.HOST].to_numpy(np.int64) if schema.HOST in ev.columns
            else np.zeros(n, np.int64))
    if not n:
        return start.copy(), np.zeros(0, np.int64), host
    device = ev[schema.DEVICE].to_numpy(np.int64)
    op, names = text_codes(ev[schema.OP])
    program = [text_codes(ev[c])[0] for c in (schema.PROGRAM, schema.PROGRAM_ID)
               if c in ev.columns]
    step = ev[schema.STEP].to_numpy(np.int64)
    # the k-th execution of an op in a step on a device: its rank there in time order (each
    # row's (program, op, step, host, device) numbered once, then sorted by it and time)
    run = _numbered([*program, op, step, host, device])
    order = np.lexsort((start, run))
    run = run[order]
    new = np.ones(n, bool)
    new[1:] = run[1:] != run[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    execution = np.empty(n, np.int64)
    execution[order] = np.arange(n) - first
    group = _group_of(op, names, device, groups)
    offset = np.zeros(n, np.int64)
    scope = host  # arrivals compare within a host unless the hosts' clocks are aligned
    if clock_offsets_ns is not None:
        offset = host_offsets(host, clock_offsets_ns)
        scope = np.zeros(n, np.int64)
    by = [*program, op, step, execution, group, scope]
    last = _latest(by, start + offset) - offset
    return np.maximum(last, start), execution, host


def _numbered(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Per row, a number equal where its ``keys`` (integer arrays, none missing) all are
    (``harness.measure.grouping.groups``: one key made of them, not a sort by each)."""
    frame = pd.DataFrame(dict(enumerate(keys)), copy=False)
    return grouping.groups(frame, list(frame.columns))[0]


def _latest(keys: Sequence[np.ndarray], t: np.ndarray) -> np.ndarray:
    """Per row, the latest ``t`` of the rows whose ``keys`` (integer arrays) equal its own:
    ``groupby(keys).transform("max")``, each row's group numbered once (``_numbered``)."""
    group = _numbered(keys)
    latest = np.full(int(group.max()) + 1 if len(group) else 0, np.iinfo(np.int64).min)
    np.maximum.at(latest, group, t)
    return latest[group]


def host_offsets(hosts, offsets: Mapping[int, int] | None) -> np.ndarray:
    """Per row of ``hosts`` (host ids): its clock's offset in ``offsets`` (host -> ns; 0 where
    it names none), looked up once per host, not once per row."""
    hosts = np.asarray(hosts, np.int64)
    if not offsets or not len(hosts):
        return np.zeros(len(hosts), np.int64)
    known, at = np.unique(hosts, return_inverse=True)
    return np.asarray([int(offsets.get(int(h), 0)) for h in known], np.int64)[at]


def text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row, a code that is equal where the rows' texts (``as_text``) are, and each code's
    text: a categorical's codes taken as they are, not its rows converted."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        names = column.cat.categories.astype(str)
        if (not len(codes) or codes.min() >= 0) and names.is_unique:
            return codes.astype(np.int64), names.to_numpy(object)
    codes, names = pd.factorize(as_text(column))
    return codes.astype(np.int64), np.asarray(names, object)


def sorted_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``column`` as integers in its sort order (as ``groupby`` and ``sort_values`` order it),
    and where a value is missing: integers as they are, other values by their place among the
    column's distinct values sorted."""
    if pd.api.types.is_integer_dtype(column.dtype):
        return column.to_numpy(np.int64), np.zeros(len(column), bool)
    codes = pd.factorize(column, sort=True)[0].astype(np.int64)
    return codes, codes < 0


def _group_of(op: np.ndarray, names: np.ndarray, device: np.ndarray,
              groups: Groups | None) -> np.ndarray:
    """Each row's replica group among its op's ``groups`` (its index there); -1 where the op
    has none named, or names none holding the device: then every device of the execution.
    ``op``: each row's code, ``names`` each code's op name (``text_codes``)."""
    out = np.full(len(op), -1, np.int64)
    if not groups or not len(op):
        return out
    by_op = np.argsort(op, kind="stable")  # the rows of each code together
    bounds = np.searchsorted(op[by_op], np.arange(len(names) + 1))
    for code, name in enumerate(names):
        named_groups = groups.get(name)
        if named_groups is None or bounds[code] == bounds[code + 1]:
            continue
        rows = by_op[bounds[code]:bounds[code + 1]]
        out[rows] = _index_of(named_groups, device[rows])
    return out


def _index_of(named_groups: Sequence[Collection[int]], device: np.ndarray) -> np.ndarray:
    """Per device id: the index of the group of ``named_groups`` holding it (the last, where
    several do), or -1; looked up once per distinct device."""
    index = {int(d): i for i, g in enumerate(named_groups) for d in g}
    known, at = np.unique(device, return_inverse=True)
    return np.asarray([index.get(int(d), -1) for d in known], np.int64)[at]
