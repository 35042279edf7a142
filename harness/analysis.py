"""The whole pipeline on one capture: parse -> predict -> compare -> report.

``analyze(fn, *args)`` runs it on any jitted function (what a user tries on their own model);
``analyze_capture(capture)`` on a capture that already exists (what ``harness run`` does).
"""
from __future__ import annotations

import logging
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.calibrate import drift
from harness.capture import Capture, capture
from harness.compare import (
    beats_roofline_reason,
    by_category,
    compare,
    ops_beating_roofline,
    summary,
)
from harness.hlo import cross_check, hlo_costs, parse_module
from harness.ops import op_times, step_samples, step_time
from harness.report import plots
from harness.report.document import CATEGORIES_PNG, ROOFLINE_PNG, Report
from harness.sharding import unexpected_collectives
from harness.trace.load import load_events

log = logging.getLogger(__name__)


@dataclass
class Analysis:
    """One analysed capture: the tables, the summary figures and the report."""

    capture: Capture
    events: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    categories: pd.DataFrame
    summary: dict
    report: Report
    chip: object
    cross_check: dict = field(default_factory=dict)

    @property
    def meta(self) -> dict:
        return self.report.meta


def resolve_chip(chip=None, device=None) -> tuple[object, list[str], dict]:
    """The chip to predict for, notes about how it was chosen, and metadata to keep with the
    run (the host calibration behind a ``cpu`` chip).

    ``chip``: a name or a ``predictions.hardware.Chip``; None picks the chip of ``device`` (the
    first JAX device by default). On CPU the calibrated ``cpu`` entry is used (a quick
    calibration runs when this host has none).
    """
    from predictions import hardware

    if chip is not None:
        entry = hardware.chip_entry(chip)
        if device is None:
            import jax

            device = jax.devices()[0]
        try:
            ran_on = hardware.chip_for(device).name
        except KeyError:  # a device kind the registry does not know: name it as JAX does
            ran_on = str(getattr(device, "device_kind", device))
        notes = [] if ran_on == entry.name else [
            f"predicted for {entry.name} but measured on {ran_on}: efficiencies compare two "
            f"machines (what {entry.name} should do against what this host did)"]
        return entry, notes, {}
    if device is None:
        import jax

        device = jax.devices()[0]
    entry = hardware.chip_for(device)
    notes, meta = [], {}
    if entry.name == "cpu":
        import jax

        from harness.calibrate.chip import ensure_cpu_chip

        # this process's devices: a multi-process job cannot run programs on the others'
        entry, cal, measured = ensure_cpu_chip(jax.local_device_count())
        meta["calibration"] = {k: v for k, v in cal.to_dict().items() if k != "samples"}
        if measured:
            notes.append("cpu chip: no saved calibration for this host; ran a quick one "
                         "(`harness calibrate` measures a full one)")
        notes.append("CPU run: the virtual devices share the host's cores, so collectives "
                     "mostly measure rendezvous skew between device threads, not a network")
    return entry, notes, meta


def analyze_capture(cap: Capture, *, chip=None, title: str | None = None,
                    model_flops: float | None = None, analytic_s: float | None = None,
                    book: Callable | None = None,
                    expected_collectives: dict[str, int] | None = None,
                    meta: dict | None = None, events: pd.DataFrame | None = None,
                    notes: list[str] | None = None, with_plots: bool = True) -> Analysis:
    """Parse, predict and compare one capture; build its report (with plots).

    ``model_flops``: the step's useful FLOPs over all devices (gives MFU); ``analytic_s``: the
    book's step time. ``book(chip) -> harness.analytic.Analytic`` supplies both for the chip.
    ``events``: the EVENTS to analyse when they do not come from ``cap``'s own trace (a
    multi-host run merges every process's); ``notes`` go into the report first; ``with_plots``
    False leaves out the report's plots (a sweep point: matplotlib costs more than the step).
    """
    entry, chip_notes, chip_meta = resolve_chip(chip)
    notes = list(notes or []) + chip_notes
    host = (meta or {}).get(drift.HOST_DRIFT)
    if chip is None and entry.kind == "cpu" and host:
        entry, f, note = drift.apply(entry, chip_meta.get("calibration"), host)
        meta = dict(meta, **{drift.HOST_DRIFT: dict(host, factor=f)})
        notes += [note] if note else []
    formula = None
    if book is not None:
        try:
            est = book(entry)
        except (ValueError, KeyError) as e:  # e.g. a mesh axis the chip's topology cannot hold
            notes.append(f"no workload-level prediction on {entry.name}: {e}")
        else:
            model_flops, analytic_s, formula = est.model_flops, est.analytic_s, est.formula
    events = load_events(cap.trace_dir) if events is None else events
    measured = op_times(events)
    module = parse_module(cap.hlo_text)
    predicted = hlo_costs(module, entry)
    # The trace may hold other programs (e.g. a user's helper jits); compare the captured one.
    program = cap.program or (measured[schema.PROGRAM].iloc[0] if len(measured) else "")
    measured = measured[measured[schema.PROGRAM] == program]
    ops = compare(measured, predicted)
    cats = by_category(ops)
    devices = int(cap.meta.get("device_count", events[schema.DEVICE].nunique()))
    t_step = _step_s(cap, events[events[schema.PROGRAM] == program])
    summ = summary(ops, step_s=t_step, peak_flops_per_s=entry.flops_per_s(_peak_dtype(entry)),
                   devices=devices, model_flops=model_flops, analytic_s=analytic_s)
    if formula:
        summ["analytic_formula"] = formula
    check = cross_check(module, cap.cost_analysis) if cap.cost_analysis else {}
    if check.get("flops_rel_diff") is not None:
        summ["flops_vs_cost_analysis"] = check["flops_rel_diff"]
        if check.get("loops"):  # XLA's analysis counts a loop body once
            summ["flops_vs_cost_analysis_loops_once"] = check["flops_loops_once_rel_diff"]
    beating = ops_beating_roofline(ops)
    if beating:
        notes.append(f"{beating} run {beats_roofline_reason(entry.name, entry.kind)}")
    if summ["coverage"] < 0.95:
        notes.append(f"only {summ['coverage']:.0%} of measured time is in ops a rule predicts")
    unexpected = None
    if expected_collectives is not None:
        unexpected = unexpected_collectives(ops, expected_collectives)
        if not unexpected.empty:
            notes.append(f"{len(unexpected)} collective op(s) the layout did not call for; "
                         f"expected {expected_collectives or 'none'}")
    full_meta = dict(cap.meta, **(meta or {}), **chip_meta, chip=entry.name)
    figures = {}
    if with_plots:
        png = plots.roofline(ops, peak_flops_per_s=entry.flops_per_s(_peak_dtype(entry)),
                             hbm_bytes_per_s=entry.hbm_bytes_per_s, chip_name=entry.name)
        if png:
            figures[ROOFLINE_PNG] = png
        png = plots.category_bars(cats)
        if png:
            figures[CATEGORIES_PNG] = png
    report = Report(title=title or f"{program} on {devices}x {cap.meta.get('device_kind', '?')}"
                    f" (predicted for {entry.name})", ops=ops, categories=cats, summary=summ,
                    meta=full_meta, notes=notes, unexpected=unexpected, plots=figures)
    return Analysis(capture=cap, events=events, ops=ops, steps=step_samples(events),
                    categories=cats, summary=summ, report=report, chip=entry, cross_check=check)


def _step_s(cap: Capture, events: pd.DataFrame) -> float:
    """``step_s``: the median wall time, dispatch to outputs ready, of the untraced steps
    ``capture`` runs right after the traced ones (a directly timed step: tracing's cost left
    out). A trace captured elsewhere has no such timing: the busiest device's summed op time
    per step stands in (on a shared-core CPU host it exceeds the wall time, as device threads
    wait for cores)."""
    times = cap.meta.get("step_times_s") or []
    return float(statistics.median(times)) if times else step_time(events)


def _peak_dtype(entry) -> str:
    """The dtype whose peak the summary quotes: fp32 on a host CPU, else bf16 where listed."""
    for dtype in (("fp32", "bf16") if entry.kind == "cpu" else ("bf16", "fp32")):
        try:
            if entry.flops_per_s(dtype) > 0:
                return dtype
        except (KeyError, ValueError):
            continue
    return "bf16"


def analyze(fn, *args, chip=None, steps: int = 5, warmup: int = 2,
            out_dir: str | Path | None = None, **kwargs) -> Analysis:
    """Capture ``fn(*args)`` (jitted, any shardings) and analyse it per op.

    ``chip``: predict for this chip (default: the chip the program runs on). The trace goes to
    ``out_dir`` (a temporary directory by default). ``kwargs`` go to ``analyze_capture``.
    """
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="harness-"))
    cap = capture(fn, args, warmup=warmup, steps=steps, out_dir=out)
    return analyze_capture(cap, chip=chip, **kwargs)
