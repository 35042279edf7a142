"""The pure pipeline: a trace's EVENTS, the program's parsed HLO and a chip -> the run's tables.

``analyze(trace, module, chip, context)`` reads nothing, writes nothing and measures nothing:
the trace was decoded once (``harness.trace``), the HLO parsed once (``harness.hlo``), the chip
resolved (and, for a CPU host, calibrated) before (``harness.chip``). What the trace does not
say about the run (its untraced step times, the book's estimate, the collectives the layout
calls for, XLA's cost analysis) comes in a ``Context`` by name. ``harness.runs.pipeline`` wires
it between capture and the stored ``Run``.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from harness import schema
from harness.compare import (
    beats_roofline_reason,
    by_category,
    compare,
    ops_beating_roofline,
    peak_dtype,
    summary,
    unexpected_collectives,
)
from harness.hlo import Module, cross_check, cross_check_skip, hlo_costs
from harness.memory import host_note
from harness.ops import op_times, step_samples, step_time
from harness.shares import apart, host_shares, op_timing
from harness.trace.load import TraceEvents

# A run's notes say what tracing cost when its traced steps ran this much slower than untraced
# ones (on CPU, XLA's per-op host events cost about 1.2-1.3x a llama_train tiny step; on the
# H100 the cost was within noise).
TRACE_NOTE = 1.05


@dataclass(frozen=True)
class Context:
    """What the trace does not say about the run, each by name.

    ``program``: the program to report (default: the one that took the most time first in the
    measured table). ``devices``: the run's device count (default: devices in the trace).
    ``step_times_s`` / ``traced_step_times_s``: wall times of the untraced and the
    traced steps (``harness.capture``). ``book``: the book's estimate of the workload's step on
    this chip (``predictions.step.Analytic``). ``memory``: XLA's memory figures of the run
    (``harness.memory.host_note``). ``notes`` come first in the report.
    """

    program: str = ""
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


@dataclass
class Tables:
    """What ``analyze`` derives: the OPS table ranked by gap, per-category sums, per-step
    samples, the collectives the layout did not call for, summary figures, notes, XLA's
    cross-check, and how ops were timed (``harness.shares.op_timing``)."""

    ops: pd.DataFrame
    categories: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    notes: list[str]
    unexpected: pd.DataFrame | None
    cross_check: dict
    op_timing: str
    program: str


def analyze(trace: TraceEvents, module: Module, chip, context: Context = Context()) -> Tables:
    """Measure, predict and compare one program of a decoded trace on ``chip``."""
    ctx, notes = context, list(context.notes)
    events = trace.events
    predicted = hlo_costs(module, chip, async_on=trace.async_time_on)
    # the trace names an async op (``fusion-start.3`` in the HLO text) by the op it wraps
    if trace.async_names:
        predicted[schema.OP] = predicted[schema.OP].replace(trace.async_names)
    shared = trace.shares_cores
    timed = host_shares(events, apart(predicted)) if shared else events
    measured = op_times(timed, shares=shared)
    # The trace may hold other programs (e.g. a user's helper jits); compare the captured one.
    program = ctx.program or (measured[schema.PROGRAM].iloc[0] if len(measured) else "")
    measured = measured[measured[schema.PROGRAM] == program]
    ops = compare(measured, predicted)
    cats = by_category(ops)
    devices = int(ctx.devices or events[schema.DEVICE].nunique())
    t_step = _step_s(ctx.step_times_s, events[events[schema.PROGRAM] == program])
    peak = chip.flops_per_s(peak_dtype(chip))
    est = ctx.book
    summ = summary(ops, step_s=t_step, peak_flops_per_s=peak, devices=devices,
                   model_flops=est.model_flops if est else None,
                   analytic_s=est.analytic_s if est else None)
    if est is not None and est.formula:
        summ[schema.ANALYTIC_FORMULA] = est.formula
    if est is not None and est.flops_formula and summ.get(schema.MFU) is not None:
        summ[schema.MFU_FORMULA] = est.flops_formula
        if est.book_flops and t_step > 0:  # the book's 6P, printed beside it
            summ[schema.MFU_BOOK] = est.book_flops / (t_step * devices * peak)
    notes += _timing(summ, ctx)
    skip = cross_check_skip(module, ctx.cost_analysis)
    check = cross_check(module, ctx.cost_analysis) if not skip else {}
    if skip:
        notes.append(f"no cost_analysis cross-check: {skip}")
    elif check.get("flops_rel_diff") is not None:
        summ[schema.FLOPS_VS_COST_ANALYSIS] = check["flops_rel_diff"]
        if check.get("loops"):  # XLA's analysis counts a loop body once
            summ[schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE] = check["flops_loops_once_rel_diff"]
    beating = ops_beating_roofline(ops)
    if beating:
        notes.append(f"{beating} run {beats_roofline_reason(chip.name, chip.kind)}")
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
    return Tables(ops=ops, categories=cats, steps=step_samples(timed, shares=shared), summary=summ,
                  notes=notes, unexpected=unexpected, cross_check=check,
                  op_timing=op_timing(shared), program=program)


def _timing(summ: dict, ctx: Context) -> list[str]:
    """Add what tracing cost and the user's own executable's step time to ``summ``; the notes
    they call for."""
    notes = []
    overhead = trace_overhead(ctx.traced_step_times_s, ctx.step_times_s)
    if overhead is not None:
        summ[schema.TRACE_OVERHEAD] = overhead
        if overhead > TRACE_NOTE:
            notes.append(f"tracing slowed each step {overhead:.2f}x (median traced step over "
                         f"median untraced one): op times come from the traced steps and carry "
                         f"part of that cost; step_s is untraced")
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


def _step_s(times: Sequence[float], events: pd.DataFrame) -> float:
    """``step_s``: the median wall time, dispatch to outputs ready, of the untraced steps
    ``capture`` runs right after the traced ones (a directly timed step: tracing's cost left
    out). A trace captured elsewhere has no such timing: the busiest device's summed op time
    per step stands in (on a shared-core CPU host it exceeds the wall time, as device threads
    wait for cores)."""
    return float(statistics.median(times)) if times else step_time(events)
