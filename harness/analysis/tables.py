"""The pure pipeline: a trace's EVENTS, the program's parsed HLO and a chip -> the run's tables.

``derive(trace, modules, chip, context)`` reads nothing, writes nothing and measures nothing:
the trace was decoded once (``harness.trace``), each program's HLO parsed once
(``harness.hlo``), the chip resolved (and, for a CPU host, calibrated) before
(``harness.chip.resolve``). What the trace does not say about the run (its untraced step times, the
book's estimate, the collectives the layout calls for, XLA's cost analysis) comes in a
``Context`` by name. Each compilation is predicted and measured on its own
(``harness.analysis.programs``); the tables are the Run's (``harness.record.Tables``), and
``harness.runs.pipeline`` wires this between capture and the stored ``Run``.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from harness import schema
from harness.analysis.async_pairs import left_out_note
from harness.analysis.gaps import (
    beats_roofline_reason,
    by_category,
    ops_beating_roofline,
    peak_dtype,
    summary,
    unexpected_collectives,
)
from harness.analysis.programs import (
    measure,
    predicted,
    program_notes,
    program_table,
    reported,
    samples,
)
from harness.capture.memory import host_note
from harness.hlo import Module, cross_check, cross_check_skip
from harness.measure.arrivals import collective_ops, named_collectives, replica_groups
from harness.measure.ops import named, step_time
from harness.measure.programs import ProgramKey, module_for
from harness.measure.shares import apart, host_shares, op_timing
from harness.record import Tables
from harness.step import containers, simulated, step_figures
from harness.step.bubble import bubble
from harness.step.transfers import transfers
from harness.trace.load import TraceEvents

# A run's notes say what tracing cost when its traced steps ran this much slower than untraced
# ones (on CPU, XLA's per-op host events cost about 1.2-1.3x a llama_train tiny step; on the
# H100 the cost was within noise).
TRACE_NOTE = 1.05


@dataclass(frozen=True)
class Context:
    """What the trace does not say about the run, each by name.

    ``program``: the program whose ops to report, by name (every compilation of it), by
    program id (that one) or ``all`` (every program that ran); default: the step program
    (``harness.analysis.programs.step_program``). ``mesh``: the run's named mesh axes
    ({"data": 4, "model": 2}), which a recompiled program's note names shardings by.
    ``devices``: the run's device
    count (default: devices in the trace). ``step_times_s`` / ``traced_step_times_s``: wall
    times of the untraced and the traced steps (``harness.capture.steps``). ``book``: the book's
    estimate of the workload's step on this chip (``predictions.step.Analytic``). ``memory``:
    XLA's memory figures of the run (``harness.capture.memory.host_note``). ``notes`` come first in
    the report. ``system``: the network past one node or slice the user declared
    (``predictions.network``): each collective priced at the levels its groups cross.
    ``arguments``: each program's parameters' paths in the user's code
    (``schema.ARGUMENT_PATHS``), which a recompiled program's note names them by.
    """

    program: str = ""
    mesh: Mapping[str, int] | None = None
    devices: int | None = None
    step_times_s: Sequence[float] = ()
    traced_step_times_s: Sequence[float] = ()
    graph_step_s: float | None = None
    graph_note: str = ""
    cost_analysis: Mapping = field(default_factory=dict)
    book: object | None = None
    expected_collectives: Mapping[str, int] | None = None
    memory: Mapping = field(default_factory=dict)
    notes: Sequence[str] = ()
    system: object | None = None  # predictions.network.System: collectives priced by level
    arguments: Mapping | None = None


def host_cores() -> int:
    """The cores this process may run on: those its devices' threads share where the trace was
    taken here (``harness run``), for the waits for a core (``harness.step.waits``)."""
    get = getattr(os, "sched_getaffinity", None)
    return len(get(0)) if get else (os.cpu_count() or 1)


def groups_of(modules: Mapping[ProgramKey, Module]) -> dict:
    """Op name -> its replica groups (``arrivals.replica_groups``) over every program; a name
    two programs give different groups is left out (its execution waits for all its devices)."""
    out, clash = {}, set()
    for module in modules.values():
        for op, groups in replica_groups(module).items():
            clash |= {op} if out.setdefault(op, groups) != groups else set()
    return {op: g for op, g in out.items() if op not in clash}


def derive(trace: TraceEvents, modules: Mapping[ProgramKey, Module], chip,
            context: Context = Context()) -> Tables:
    """Measure, predict and join every program of a decoded trace on ``chip``: ``modules``
    holds the HLO of each (name, program id) there is one for; a program without one is
    measured only. The ops, step and summary are of the step program; ``context.program``
    names others (a name, a program id, ``all``). The tables' ``meta`` says how ops were timed
    (``schema.OP_TIMING``) and which program is the step program (``schema.PROGRAM``,
    ``schema.PROGRAM_ID``), where one ran."""
    ctx, notes = context, list(context.notes)
    events, shared = trace.events, trace.shares_cores
    ran = list(trace.ran)  # (found once per trace: the decode read them first)
    costed = {key: predicted(module_for(modules, key), chip, trace, ctx.system) for key in ran}
    if shared:  # an op's share of the host counts every program running beside it
        opcodes = {op: code for p in costed.values()
                   for op, code in zip(p[schema.OP].astype(str), p[schema.OPCODE])
                   if isinstance(code, str) and code}
        events = host_shares(events, set().union(*(apart(p) for p in costed.values())),
                             collective_ops(named_collectives(events) | set(opcodes), opcodes),
                             groups_of(modules))
    per = {key: measure(events, key, costed[key], module_for(modules, key) is not None,
                         trace) for key in ran}
    shown = reported(per, ctx.program) or reported(per, "")
    main = shown[0] if shown else ("", "")
    ops = pd.concat([per[k].ops for k in shown] or [schema.empty(schema.OPS)],
                    ignore_index=True)
    main_ops = per[main].ops if main in per else ops
    ops = ops.sort_values(schema.GAP_S, ascending=False, kind="stable").reset_index(drop=True)
    steps = pd.concat([samples(per[k], trace) for k in shown]
                      or [schema.empty([schema.PROGRAM, schema.OP, schema.STEP,
                                        schema.MEASURED_S])], ignore_index=True)
    module = module_for(modules, main)
    devices = int(ctx.devices or events[schema.DEVICE].nunique())
    main_events = per[main].events if main in per else events
    held = containers(costed.get(main, schema.empty(schema.OPS_PREDICTED)), main_events)
    step, spans = step_figures(main_events, main_ops, pairs=_pairs(module, trace), apart=held,
                               devices=range(devices) if ctx.devices else (), book=ctx.book,
                               host=trace.host, groups=groups_of(modules),
                               cores=host_cores() if shared else None,
                               beside=_beside(events, costed) if trace.stepped else None,
                               paced=bool(ctx.traced_step_times_s))
    predicted_step, predicted_spans = simulated(module, main_ops, main_events, step,
                                                trace_names=trace.async_names,
                                                time_on=trace.async_time_on, apart=held)
    step.update({**predicted_step, **bubble(ctx.memory.get(schema.CONFIG), module, main_events,
                                            step)})  # (the run's meta holds its config)
    t_step = _step_s(ctx.step_times_s, step, main_events)
    summ = _summary(main_ops, step, t_step, chip, devices, ctx)
    notes += _timing(summ, ctx)
    check = _cross_check(module, ctx.cost_analysis, summ, notes)
    notes += program_notes(ran, shown, per, modules, main, ctx.mesh, asked=ctx.program,
                           arguments=ctx.arguments)
    beating = ops_beating_roofline(ops, spread=chip.spread)
    if beating:
        notes.append(f"{beating} run {beats_roofline_reason(chip.name, chip.kind, chip.spread)}")
    notes += filter(None, [left_out_note(ops)])
    ram = host_note(ctx.memory)
    if ram:
        notes.append(ram)
    if summ[schema.COVERAGE] < 0.95:
        notes.append(f"only {summ[schema.COVERAGE]:.0%} of measured time is in ops a rule predicts")
    unexpected = None
    if ctx.expected_collectives is not None:
        unexpected = unexpected_collectives(ops, dict(ctx.expected_collectives))
        if not unexpected.empty:
            notes.append(f"{len(unexpected)} collective op(s) the layout did not call for; "
                         f"expected {dict(ctx.expected_collectives) or 'none'}")
    return Tables(ops=ops, categories=by_category(ops), steps=steps, summary=summ, notes=notes,
                  unexpected=unexpected, cross_check=check, programs=program_table(per),
                  step=step, step_spans=spans, predicted_spans=predicted_spans,
                  meta=_found(shared, main))


def _summary(main_ops: pd.DataFrame, step: dict, t_step: float, chip, devices: int,
             ctx: Context) -> dict:
    """The step program's summary at the step time ``t_step``: its MFU against the chip's
    peak, beside the workload's book estimate (``ctx.book``) where there is one."""
    est = ctx.book
    peak = chip.flops_per_s(peak_dtype(chip))
    summ = summary(main_ops, step_s=t_step, peak_flops_per_s=peak, devices=devices,
                   model_flops=est.model_flops if est else None,
                   analytic_s=est.analytic_s if est else None,
                   bus_bytes=est.bus_bytes if est else None)
    summ = _step_figures(summ, step, ctx.step_times_s)
    if est is not None and est.formula:
        summ[schema.ANALYTIC_FORMULA] = est.formula
    if est is not None and est.flops_formula and summ.get(schema.MFU) is not None:
        summ[schema.MFU_FORMULA] = est.flops_formula
        if est.book_flops and t_step > 0:  # the book's 6P, printed beside it
            summ[schema.MFU_BOOK] = est.book_flops / (t_step * devices * peak)
    return summ


def _found(shared: bool, main: tuple[str, str]) -> dict:
    """What the analysis found of the run, for its meta: how its ops were timed and the step
    program (name and program id), where one ran."""
    return {schema.OP_TIMING: op_timing(shared),
            **({schema.PROGRAM: main[0], schema.PROGRAM_ID: main[1]} if main[0] else {})}


def _beside(events: pd.DataFrame, costed: Mapping) -> pd.DataFrame:
    """Every program's ops, each program's containers left out: the waits
    (``harness.step.waits``) read them where steps are the markers', so that a device running
    another program is not waiting."""
    held = set().union(*(apart(p) for p in costed.values()))
    return events[~named(events[schema.OP], held)] if held else events


def _cross_check(module: Module | None, cost_analysis: Mapping, summ: dict,
                 notes: list[str]) -> dict:
    """XLA's cost analysis against the module's own counts (``harness.hlo.cross_check``): its
    FLOPs' relative difference added to ``summ``, or a note on why there is none."""
    if module is None:
        return {}
    skip = cross_check_skip(module, cost_analysis)
    if skip:
        notes.append(f"no cost_analysis cross-check: {skip}")
        return {}
    check = cross_check(module, cost_analysis)
    if check.get("flops_rel_diff") is not None:
        summ[schema.FLOPS_VS_COST_ANALYSIS] = check["flops_rel_diff"]
        if check.get("loops"):  # XLA's analysis counts a loop body once
            summ[schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE] = check["flops_loops_once_rel_diff"]
    return check


def _timing(summ: dict, ctx: Context) -> list[str]:
    """Add what tracing cost and the user's own executable's step time to ``summ``; the notes
    they call for."""
    notes = []
    overhead = trace_overhead(ctx.traced_step_times_s, ctx.step_times_s)
    if overhead is not None:
        summ[schema.TRACE_OVERHEAD] = overhead
        if overhead > TRACE_NOTE:
            notes.append(f"tracing slowed each step {overhead:.2f}x (median traced step over "
                         f"median untraced one): op times and step_s come from the traced "
                         f"steps and carry part of that cost; wall_step_s is untraced")
    if ctx.graph_step_s is not None:
        summ[schema.GRAPH_STEP_S] = ctx.graph_step_s
    if ctx.graph_note:
        notes.append(ctx.graph_note)
    return notes


def trace_overhead(traced: Sequence[float], plain: Sequence[float]) -> float | None:
    """What tracing cost a capture: its median traced step over its median untraced one (the
    steps ``capture`` times right after the trace), or None when either is missing."""
    if not traced or not plain or statistics.median(plain) <= 0:
        return None
    return float(statistics.median(traced) / statistics.median(plain))


def _pairs(module: Module | None, trace: TraceEvents) -> dict[str, str]:
    """The async transfers to make one span each: where the layout times a pair's ``-done``
    (TPU XLA Ops) the transfer is in flight from the ``-start`` to the ``-done``'s end. The
    pairs the simulated step sends over links (``harness.step.transfers``): collectives, copies
    and TPU collective chains; async compute stays two core ops, as there."""
    if module is None or trace.async_time_on != "done":
        return {}
    names = trace.async_names
    return {names.get(s, s): names.get(d, d) for s, d in transfers(module).done_of.items()}


def _step_figures(summ: dict, step: Mapping, times: Sequence[float]) -> dict:
    """The summary with the step's figures first: ``step_s`` from the timeline and, where
    capture timed untraced steps, ``wall_step_s`` beside it."""
    head = {}
    if schema.STEP_S in step:
        head[schema.STEP_S] = step[schema.STEP_S]
    if times:
        head[schema.WALL_STEP_S] = float(statistics.median(times))
    return {**head, **summ}


def _step_s(times: Sequence[float], step: Mapping, events: pd.DataFrame) -> float:
    """The step time that MFU and HFU are over: the median wall time, dispatch to outputs
    ready, of the untraced steps ``capture`` runs right after the traced ones (a directly
    timed step: tracing's cost left out); for a trace captured elsewhere, the measured step
    from its timeline (``schema.STEP_S``); the busiest device's summed op time per step where
    the timeline gives none."""
    if times:
        return float(statistics.median(times))
    if step.get(schema.STEP_S):
        return float(step[schema.STEP_S])
    return step_time(events)
