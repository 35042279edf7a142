"""The whole pipeline on one capture: parse -> predict -> compare -> report.

``analyze(fn, *args)`` runs it on any jitted function (what a user tries on their own model);
``analyze_capture(capture)`` on a capture that already exists (what ``harness run`` does).
"""
from __future__ import annotations

import json
import logging
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.calibrate import drift
from harness.capture import CAPTURE_FILE, HLO_FILE, STEPS, Capture, capture
from harness.chip import chip_for_run, peak_dtype
from harness.compare import (
    beats_roofline_reason,
    by_category,
    compare,
    ops_beating_roofline,
    summary,
)
from harness.errors import HarnessError
from harness.hlo import cross_check, cross_check_skip, hlo_costs, parse_module
from harness.memory import host_note
from harness.ops import op_times, step_samples, step_time
from harness.report import plots
from harness.report.document import CATEGORIES_PNG, ROOFLINE_PNG, Report
from harness.sharding import unexpected_collectives
from harness.shares import apart, host_shares, op_timing, shares_cores
from harness.trace.hlo_proto import device_kind, trace_hlo
from harness.trace.load import find_trace_file, read_events, read_xspace

log = logging.getLogger(__name__)

# A run's notes say what tracing cost when its traced steps ran this much slower than untraced
# ones (on CPU, XLA's per-op host events cost about 1.2-1.3x a llama_train tiny step; on the
# H100 the cost was within noise).
TRACE_NOTE = 1.05


@dataclass
class Analysis:
    """One analysed capture: its report (ops, categories, summary, notes, plots) and what the
    report was made from (the capture, its events and per-step samples, the chip, XLA's
    cross-check). ``harness.runs.store`` saves the report and loads it back."""

    capture: Capture
    events: pd.DataFrame
    steps: pd.DataFrame
    report: Report
    chip: object
    cross_check: dict = field(default_factory=dict)
    async_names: dict = field(default_factory=dict)  # HLO text name -> trace name (async ops)

    @property
    def ops(self) -> pd.DataFrame:
        return self.report.ops

    @property
    def categories(self) -> pd.DataFrame:
        return self.report.categories

    @property
    def summary(self) -> dict:
        return self.report.summary

    @property
    def meta(self) -> dict:
        return self.report.meta


def analyze_capture(cap: Capture, *, chip=None, title: str | None = None,
                    model_flops: float | None = None, analytic_s: float | None = None,
                    book: Callable | None = None,
                    expected_collectives: dict[str, int] | None = None,
                    meta: dict | None = None, events: pd.DataFrame | None = None,
                    notes: list[str] | None = None, device=None,
                    async_names: dict | None = None, with_plots: bool = True,
                    layout: str | None = None) -> Analysis:
    """Parse, predict and compare one capture; build its report (with plots).

    ``model_flops``: the step's useful FLOPs over all devices (gives MFU); ``analytic_s``: the
    book's step time. ``book(chip) -> harness.book.Analytic`` supplies both for the chip.
    ``events``: the EVENTS to analyse when they do not come from ``cap``'s own trace (a
    multi-host run merges every process's); ``notes`` go into the report first. ``device``: the
    device (or device kind) that ran the capture, when not this process's first device.
    ``async_names``: the trace's name of each async op, with ``events`` (``TraceEvents``), and
    ``layout``, the trace layout that read them (a CPU one times ops as host shares,
    ``harness.shares``; without it, the devices' platform in ``cap.meta`` decides).
    ``with_plots`` False leaves out the report's plots (a sweep point: matplotlib costs more
    than the step).
    """
    entry, chip_notes, chip_meta = chip_for_run(chip, device)
    notes = list(notes or []) + chip_notes
    host = (meta or {}).get(drift.HOST_DRIFT)
    if chip is None and entry.kind == "cpu" and host:
        entry, f, note = drift.apply(entry, chip_meta.get(schema.CALIBRATION), host)
        meta = dict(meta, **{drift.HOST_DRIFT: {**host, drift.FACTOR: f}})
        notes += [note] if note else []
    formula = est = None
    if book is not None:
        try:
            est = book(entry)
        except (ValueError, KeyError) as e:  # e.g. a mesh axis the chip's topology cannot hold
            notes.append(f"no workload-level prediction on {entry.name}: {e}")
        else:
            model_flops, analytic_s, formula = est.model_flops, est.analytic_s, est.formula
    if events is None:
        read = read_events(cap.trace_dir, hlo_text=cap.hlo_text)
        events, async_names, layout = read.events, read.async_names, read.layout
    module = parse_module(cap.hlo_text)
    predicted = hlo_costs(module, entry)
    # the trace names an async op (``fusion-start.3`` in the HLO text) by the op it wraps
    if async_names:
        predicted[schema.OP] = predicted[schema.OP].replace(async_names)
    shared = shares_cores(layout, cap.meta.get("platform"))
    timed = host_shares(events, apart(predicted)) if shared else events
    measured = op_times(timed, mean=shared)
    # The trace may hold other programs (e.g. a user's helper jits); compare the captured one.
    program = cap.program or (measured[schema.PROGRAM].iloc[0] if len(measured) else "")
    measured = measured[measured[schema.PROGRAM] == program]
    ops = compare(measured, predicted)
    cats = by_category(ops)
    devices = int(cap.meta.get(schema.DEVICE_COUNT, events[schema.DEVICE].nunique()))
    t_step = _step_s(cap, events[events[schema.PROGRAM] == program])
    summ = summary(ops, step_s=t_step, peak_flops_per_s=entry.flops_per_s(peak_dtype(entry)),
                   devices=devices, model_flops=model_flops, analytic_s=analytic_s)
    if formula:
        summ[schema.ANALYTIC_FORMULA] = formula
    if est is not None and est.flops_formula and summ.get(schema.MFU) is not None:
        summ[schema.MFU_FORMULA] = est.flops_formula
        if est.book_flops and t_step > 0:  # the book's 6P, printed beside it
            summ[schema.MFU_BOOK] = est.book_flops / (
                t_step * devices * entry.flops_per_s(peak_dtype(entry)))
    overhead = trace_overhead(cap.meta)
    if overhead is not None:
        summ[schema.TRACE_OVERHEAD] = overhead
        if overhead > TRACE_NOTE:
            notes.append(f"tracing slowed each step {overhead:.2f}x (median traced step over "
                         f"median untraced one): op times come from the traced steps and carry "
                         f"part of that cost; step_s is untraced")
    if cap.meta.get(schema.GRAPH_STEP_S) is not None:
        summ[schema.GRAPH_STEP_S] = cap.meta[schema.GRAPH_STEP_S]
    if cap.meta.get(schema.GRAPH_NOTE):
        notes.append(cap.meta[schema.GRAPH_NOTE])
    skip = cross_check_skip(module, cap.cost_analysis)
    check = cross_check(module, cap.cost_analysis) if not skip else {}
    if skip:
        notes.append(f"no cost_analysis cross-check: {skip}")
    elif check.get("flops_rel_diff") is not None:
        summ[schema.FLOPS_VS_COST_ANALYSIS] = check["flops_rel_diff"]
        if check.get("loops"):  # XLA's analysis counts a loop body once
            summ[schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE] = check["flops_loops_once_rel_diff"]
    beating = ops_beating_roofline(ops)
    if beating:
        notes.append(f"{beating} run {beats_roofline_reason(entry.name, entry.kind)}")
    ram = host_note({**cap.meta, **(meta or {})})
    if ram:
        notes.append(ram)
    if summ[schema.COVERAGE] < 0.95:
        notes.append(f"only {summ[schema.COVERAGE]:.0%} of measured time is in ops a rule predicts")
    unexpected = None
    if expected_collectives is not None:
        unexpected = unexpected_collectives(ops, expected_collectives)
        if not unexpected.empty:
            notes.append(f"{len(unexpected)} collective op(s) the layout did not call for; "
                         f"expected {expected_collectives or 'none'}")
    full_meta = dict(cap.meta, **(meta or {}), **chip_meta,
                     **{schema.CHIP: entry.name, schema.OP_TIMING: op_timing(shared)})
    figures = {}
    if with_plots:
        png = plots.roofline(ops, peak_flops_per_s=entry.flops_per_s(peak_dtype(entry)),
                             hbm_bytes_per_s=entry.hbm_bytes_per_s, chip_name=entry.name)
        if png:
            figures[ROOFLINE_PNG] = png
        png = plots.category_bars(cats)
        if png:
            figures[CATEGORIES_PNG] = png
    kind = cap.meta.get(schema.DEVICE_KIND, "?")
    report = Report(title=title or f"{program} on {devices}x {kind} (predicted for {entry.name})",
                    ops=ops, categories=cats, summary=summ, meta=full_meta, notes=notes,
                    unexpected=unexpected, plots=figures)
    return Analysis(capture=cap, events=events, async_names=dict(async_names or {}),
                    steps=step_samples(timed, mean=shared), report=report,
                    chip=entry, cross_check=check)


def trace_overhead(meta: dict) -> float | None:
    """What tracing cost a capture: its median traced step over its median untraced one (the
    steps ``capture`` times right after the trace), or None when either is missing."""
    traced, plain = meta.get(schema.TRACED_STEP_TIMES_S), meta.get(schema.STEP_TIMES_S)
    if not traced or not plain or statistics.median(plain) <= 0:
        return None
    return float(statistics.median(traced) / statistics.median(plain))


def _step_s(cap: Capture, events: pd.DataFrame) -> float:
    """``step_s``: the median wall time, dispatch to outputs ready, of the untraced steps
    ``capture`` runs right after the traced ones (a directly timed step: tracing's cost left
    out). A trace captured elsewhere has no such timing: the busiest device's summed op time
    per step stands in (on a shared-core CPU host it exceeds the wall time, as device threads
    wait for cores)."""
    times = cap.meta.get(schema.STEP_TIMES_S) or []
    return float(statistics.median(times)) if times else step_time(events)


def analyze(fn, *args, chip=None, steps: int = STEPS, warmup: int = 2,
            out_dir: str | Path | None = None, command_buffers: bool = False,
            **kwargs) -> Analysis:
    """Capture ``fn(*args)`` (jitted, any shardings) and analyse it per op.

    ``chip``: predict for this chip (default: the chip the program runs on). The trace goes to
    ``out_dir`` (a temporary directory by default). ``command_buffers=True``: on GPU, trace the
    executable with XLA's command buffers (see ``harness.capture``). ``kwargs`` go to
    ``analyze_capture``.
    """
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="harness-"))
    cap = capture(fn, args, warmup=warmup, steps=steps, out_dir=out,
                  command_buffers=command_buffers)
    return analyze_capture(cap, chip=chip, **kwargs)


def analyze_trace(path: str | Path, *, chip=None, hlo: str | Path | None = None,
                  warmup_steps: int = 0, **kwargs) -> Analysis:
    """Analyse a profiler trace someone else captured (``jax.profiler``) per op.

    The program's optimized HLO comes from the trace itself (``/host:metadata``), else from
    ``hlo`` (an XLA dump, ``*after_optimizations.txt``), else from a ``module.hlo.txt`` saved
    beside it by ``harness``. ``chip``: predict for this chip (default: the trace's device).
    ``kwargs`` go to ``analyze_capture``.
    """
    trace_file = find_trace_file(path)
    space, label = read_xspace(trace_file)
    saved = _saved_beside(trace_file, Path(path))
    found = trace_hlo(space, saved.get("meta", {}).get(schema.PROGRAM, ""))
    if hlo is not None:
        text = Path(hlo).read_text()
    elif found:
        text = found[0]
    elif "hlo_text" in saved:
        text = saved["hlo_text"]
    else:
        raise HarnessError(f"{label}: the trace holds no HLO; give the program's optimized HLO "
                           f"with --hlo FILE (an XLA dump, *after_optimizations.txt)")
    read = read_events(trace_file, warmup_steps=warmup_steps, hlo_text=text)
    events = read.events
    meta = dict(saved.get("meta", {}))
    meta.setdefault(schema.PROGRAM, parse_module(text).name)
    meta.setdefault(schema.DEVICE_KIND, device_kind(space))
    meta.setdefault(schema.DEVICE_COUNT, int(events[schema.DEVICE].nunique()))
    meta[schema.TRACE_FILE] = str(trace_file)
    cap = Capture(trace_dir=trace_file.parent, hlo_text=text,
                  cost_analysis=saved.get("cost_analysis", {}), meta=meta)
    return analyze_capture(cap, chip=chip, events=events, async_names=read.async_names,
                           layout=read.layout, device=meta.get(schema.DEVICE_KIND) or None,
                           **kwargs)


def _saved_beside(trace_file: Path, root: Path) -> dict:
    """What ``harness`` saved next to a trace it captured (``capture.json``,
    ``module.hlo.txt``), searched from the trace's folder up to ``root``: ``meta``,
    ``cost_analysis``, ``hlo_text`` where found (never above ``root``, a directory given)."""
    out: dict = {}
    folder = trace_file.parent
    # a trace directory keeps its trace at plugins/profile/<run>/: three folders up at most
    for _ in range(4):
        if "meta" not in out and (folder / CAPTURE_FILE).is_file():
            saved = json.loads((folder / CAPTURE_FILE).read_text())
            out.update(meta=saved.get("meta", {}), cost_analysis=saved.get("cost_analysis", {}))
        if "hlo_text" not in out and (folder / HLO_FILE).is_file():
            out["hlo_text"] = (folder / HLO_FILE).read_text()
        if folder == root or folder == folder.parent:
            break
        folder = folder.parent
    return out

