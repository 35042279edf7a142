"""The step object of a run (``schema.STEP_OBJECT``): the measured step, the book beside it,
and the step the compiled schedule predicts (``harness.step.simulate``): played with every op
at its roofline time (``predicted_step_s``: the step this layout should take) and at its
measured duration (``replay_step_s``: a check of the schedule model against the measured step).

Which ops communicate is read from the program's OPS table: the collectives (category
``collective``, async halves included) and the async transfers (``copy-start``/``copy-done``,
``send``/``recv`` and their ``-done``s, copies over the host link). A program without HLO has
no opcodes: its ops are judged by the opcode their name starts with (``all-reduce.3``).

The waits, the longest part of a large trace's step, are read in a worker process while this
one measures the timeline, where the host has a core to spare (``harness.trace.parallel.aside``):
the same figures, the collectives' last arrivals then found from the ones the step lists alone.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import pandas as pd

from harness import schema
from harness.hlo import Module
from harness.measure.arrivals import arrivals, collective_ops, opcode_of_name
from harness.measure.ops import named
from harness.measure.per_host import clock_offsets
from harness.step.bounds import step_bounds
from harness.step.replay import replay_durations
from harness.step.simulate import critical_ops, simulate
from harness.step.stragglers import last_by_op, stragglers
from harness.step.timeline import async_spans, measure
from harness.step.transfers import roofline_durations, transfers
from harness.step.verdict import wait_figures
from harness.step.waits import cited, waits_named
from harness.trace import parallel
from predictions.rules import ASYNC_PAIRS, COLLECTIVE_OPCODES, CONTAINERS

# async transfers that are no collective: a DMA between memory spaces or a point-to-point copy
TRANSFERS = frozenset({"copy-start", "copy-done", "send", "send-done", "recv", "recv-done"})
_COMM_OPCODES = frozenset(
    {*COLLECTIVE_OPCODES, *TRANSFERS,
     *(k for k, v in ASYNC_PAIRS.items() if k.removesuffix("-start") in COLLECTIVE_OPCODES),
     *(v for k, v in ASYNC_PAIRS.items() if k.removesuffix("-start") in COLLECTIVE_OPCODES)})


def comm_ops(ops: pd.DataFrame) -> set[str]:
    """The names of the ops that communicate (module docstring)."""
    if ops.empty:
        return set()
    name = ops[schema.OP].astype(str)
    code = (ops[schema.OPCODE].fillna("").astype(str) if schema.OPCODE in ops.columns
            else pd.Series("", index=ops.index))
    code = code.where(code != "", name.map(opcode_of_name))
    comm = code.isin(_COMM_OPCODES)
    if schema.CATEGORY in ops.columns:
        comm |= ops[schema.CATEGORY] == schema.CAT_COLLECTIVE
    if schema.HOST_BYTES in ops.columns:
        comm |= ops[schema.HOST_BYTES].fillna(0) > 0
    return set(name[comm])


def containers(predicted: pd.DataFrame, events: pd.DataFrame) -> set[str]:
    """Control-flow ops, whose trace intervals enclose the ops they run (left out): by opcode
    from the program's predicted table (the OPS table leaves them out), else, for a program
    without HLO, by the opcode the names of its events imply."""
    if not predicted.empty and schema.OPCODE in predicted.columns:
        return set(predicted.loc[predicted[schema.OPCODE].isin(CONTAINERS), schema.OP]
                   .astype(str))
    names = pd.Series(events[schema.OP].astype(str).unique())
    return set(names[names.map(opcode_of_name).isin(CONTAINERS)])


def step_figures(events: pd.DataFrame, ops: pd.DataFrame, *, pairs: Mapping[str, str] | None,
                 apart: Collection[str] = (), devices: Collection[int] = (),
                 book=None, host: pd.DataFrame | None = None, groups=None,
                 cores: int | None = None, beside: pd.DataFrame | None = None,
                 paced: bool = False) -> tuple[dict, pd.DataFrame]:
    """The step object of one program: its measured step from ``events`` (its EVENTS, one
    step per marker or execution), ``ops`` its OPS table, ``pairs`` the async start -> done
    names to make one span each (where the layout times the ``-done``: TPU), ``apart`` the
    control-flow ops (``containers``), ``devices`` every device of the run, ``book`` the
    workload's estimate (``predictions.step.Analytic``)
    for the bounds ({} where neither it nor a prediction gives them); with the spans of the
    step it describes (``schema.STEP_SPANS``), for its picture. ``host``, ``groups`` and
    ``cores``: the trace's host events, the collectives' replica groups and the host's cores
    where its devices share them, for the waits (``harness.step.waits``); ``beside``: every
    program's EVENTS of the same steps (a device running another program is not waiting;
    default: ``events``)."""
    comm = comm_ops(ops)
    given = events if beside is None else beside
    # the waits, the longest part, in a worker process while this one measures the timeline,
    # where the host has a core to spare (dropped unread where there is no step)
    waited = parallel.aside(_waits_aside, (given, ops, pairs, apart, groups, host, cores,
                                           paced), int(given.memory_usage(index=False).sum()))
    out, spans = measure(events, comm, apart=apart, pairs=pairs, devices=devices)
    if out and not ops.empty and schema.PREDICTED_S in ops.columns:
        out.update(step_bounds(book, ops, comm))
    if out and waited is not None:  # (the ARRIVALS stay in the worker: the listed ones made)
        _last_arrivals(out, given, ops, groups)
        out.update(waited())
    elif out:
        seen = _Arrived(given, ops, pairs, apart, groups)
        _last_arrivals(out, seen.given, ops, groups, seen)
        out.update(_waits(seen, host=host, cores=cores, paced=paced))
    return out, spans


def _waits_aside(context: tuple, _) -> dict:
    """``step_figures``'s waits, in a worker process (``harness.trace.parallel.aside``)."""
    given, ops, pairs, apart, groups, host, cores, paced = context
    return _waits(_Arrived(given, ops, pairs, apart, groups), host=host, cores=cores,
                  paced=paced)


class _Arrived:
    """What the waits read of a program's EVENTS (``given``): them with each async pair made
    one span and the control-flow ops left out (``events``), the collectives among them
    (``coll``), the hosts' clock offsets where there are several and the ARRIVALS (``arr``;
    None without collectives): made once for the waits, the stragglers and each collective's
    last arrivals."""

    def __init__(self, given: pd.DataFrame, ops: pd.DataFrame, pairs, apart, groups):
        ev = async_spans(given, pairs or {})
        keep = ~named(ev[schema.OP], set(apart))
        self.given, self.pairs, self.apart, self.groups = given, pairs, set(apart), groups
        self.events = ev = ev if keep.all() else ev[keep]
        self.coll = coll = collective_ops(_names(ev[schema.OP]), _opcodes(ops))
        hosts = ev[schema.HOST].nunique() if schema.HOST in ev.columns else 1
        self.offsets = None
        if coll and hosts > 1:
            self.offsets = clock_offsets(arrivals(ev, coll, groups))
        self.arr = arrivals(ev, coll, groups, self.offsets) if coll else None

    def of(self, coll: set[str]) -> pd.DataFrame | None:
        """The ARRIVALS of ``coll`` (collectives) on each host's own clock, as ``arrivals``
        of the given EVENTS makes them, where those made already hold them: one host, no
        async pair made one, none of them left out; else None."""
        if self.arr is None or self.offsets is not None or self.pairs or coll & self.apart:
            return None
        if coll >= self.coll:
            return self.arr
        return self.arr[named(self.arr[schema.OP], coll)]


def _last_arrivals(step: dict, events: pd.DataFrame, ops: pd.DataFrame, groups,
                   seen: _Arrived | None = None) -> None:
    """Each collective of the step object's list with the unit last to arrive at it most
    often and by how much (``harness.step.stragglers.last_by_op``); ``seen``: the ARRIVALS
    made already, where they hold them."""
    listed = step.get(schema.STEP_COLLECTIVES) or []
    coll = collective_ops([r[schema.OP] for r in listed], _opcodes(ops))
    if not coll:
        return
    arr = seen.of(coll) if seen is not None else None
    if arr is None:
        ev = events[named(events[schema.OP], coll)]
        hosts = ev[schema.HOST].nunique() if schema.HOST in ev.columns else 1
        arr = arrivals(ev, coll, groups)
        if hosts > 1:
            arr = arrivals(ev, coll, groups, clock_offsets(arr))
    last = last_by_op(arr)
    for r in listed:
        if r[schema.OP] in last:
            r[schema.LAST_ARRIVAL] = last[r[schema.OP]]


def _opcodes(ops: pd.DataFrame) -> dict[str, str]:
    """Op name -> its HLO opcode, where the OPS table names one."""
    if ops.empty or schema.OPCODE not in ops.columns:
        return {}
    return {k: v for k, v in zip(ops[schema.OP].astype(str),
                                 ops[schema.OPCODE].fillna("").astype(str)) if v}


def _names(op: pd.Series):
    """The distinct texts of an op column (``astype(str).unique()``), each value converted
    once, not each row (a categorical's distinct values read from its codes)."""
    return pd.Series(pd.unique(op)).astype(str).unique()


def step_waits(events: pd.DataFrame, ops: pd.DataFrame, *, pairs: Mapping[str, str] | None,
               apart: Collection[str] = (), host: pd.DataFrame | None = None, groups=None,
               cores: int | None = None, paced: bool = False) -> dict:
    """The step object's waits (``harness.step.verdict.wait_figures``) of one program's
    ``events``, as ``step_figures`` reads them; ``paced``: the harness's own capture loop ran
    the steps, each waited on before the next was dispatched."""
    return _waits(_Arrived(events, ops, pairs, apart, groups), host=host, cores=cores,
                  paced=paced)


def _waits(seen: _Arrived, *, host: pd.DataFrame | None, cores: int | None,
           paced: bool) -> dict:
    """``step_waits`` of the EVENTS and ARRIVALS ``seen``."""
    ev, coll, offsets, arr = seen.events, seen.coll, seen.offsets, seen.arr
    table, untold, names = waits_named(ev, host, collectives=coll, groups=seen.groups,
                                       clock_offsets_ns=offsets, cores=cores, arrived=arr)
    if table.empty:
        return {}
    late = []
    if coll:
        period = float(table.groupby(schema.STEP)[schema.PERIOD_S].mean().median())
        starts = ev.groupby([schema.STEP, schema.DEVICE])[schema.START_NS].min()
        late = stragglers(arr, period, offsets or {}, starts)
    return wait_figures(table, untold, late, cited(ev, host), paced=paced, names=names)


def simulated(module: Module, ops: pd.DataFrame, events: pd.DataFrame, step: Mapping, *,
              trace_names: Mapping[str, str], time_on: str, apart: Collection[str] = (),
              top: int = 5) -> tuple[dict, pd.DataFrame]:
    """The predicted part of the step object, and the spans of the roofline step (for its
    picture). ``ops``: the program's OPS table (ops named as the trace names them;
    ``trace_names``: HLO name -> trace name where they differ); ``events``: its EVENTS, replayed
    from the device the measured ``step`` describes; ``time_on``: the half of an async pair the
    trace times; ``apart``: the control-flow ops (their events enclose their bodies'). A TPU
    collective chain is replayed as its two fusions' measured core times."""
    if module is None or ops.empty or schema.PREDICTED_S not in ops.columns:
        return {}, pd.DataFrame(columns=list(schema.STEP_SPANS))
    hlo = {v: k for k, v in trace_names.items()}
    comm = {hlo.get(op, op) for op in comm_ops(ops)}
    roofline = roofline_durations(module, ops.assign(**{schema.OP: ops[schema.OP].astype(str)
                                                        .map(lambda op: hlo.get(op, op))}))
    sim = simulate(module, roofline.core_s, roofline.transfer_s, comm=comm)
    out = {schema.PREDICTED_STEP_S: sim.step_s, schema.PREDICTED_COMM_S: sim.comm_s,
           schema.PREDICTED_EXPOSED_COMM_S: sim.exposed_comm_s,
           schema.CRITICAL_COMPUTE_S: sim.critical_compute_s,
           schema.CRITICAL_COMM_S: sim.critical_comm_s,
           schema.CRITICAL_PATH: [
               {schema.OP: trace_names.get(r[schema.OP], r[schema.OP]), schema.KIND: r[schema.KIND],
                schema.CRITICAL_S: float(r[schema.CRITICAL_S]), schema.COUNT: int(r[schema.COUNT])}
               for _, r in critical_ops(sim, top).iterrows()]}
    if not module.scheduled:
        out[schema.SIMULATED_FROM] = "topological order"
    if schema.DEVICE in step and not events.empty:
        moves = transfers(module)
        pairs = {s: d for s, d in moves.done_of.items() if s not in moves.chains}
        counts = dict(zip(ops[schema.OP].astype(str), ops[schema.COUNT]))
        events = events[~named(events[schema.OP], set(apart))]
        core_s, transfer_s = replay_durations(events, counts, device=step[schema.DEVICE],
                                              step=step[schema.STEP],
                                              trace_names=trace_names, pairs=pairs,
                                              time_on=time_on)
        # a span measured from -start to -done holds the time the transfer queued for its
        # link: replayed, each transfer flies on a link of its own, or it would queue twice
        links = "parallel" if time_on == "done" else "groups"
        out[schema.REPLAY_STEP_S] = simulate(module, core_s, transfer_s, comm=comm,
                                             links=links).step_s
    return out, sim.spans
