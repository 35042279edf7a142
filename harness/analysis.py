"""The whole pipeline on one capture: parse -> predict -> compare -> report.

``analyze(fn, *args)`` runs it on any jitted function (what a user tries on their own model);
``analyze_capture(capture)`` on a capture that already exists (what ``harness run`` does).
"""
from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.capture import CAPTURE_FILE, HLO_FILE, Capture, capture
from harness.compare import by_category, compare, summary
from harness.errors import HarnessError
from harness.hlo import cross_check, cross_check_skip, hlo_costs, parse_module
from harness.ops import op_times, step_samples, step_time
from harness.report import plots
from harness.report.document import CATEGORIES_PNG, ROOFLINE_PNG, Report
from harness.sharding import unexpected_collectives
from harness.trace.hlo_proto import device_kind, trace_hlo
from harness.trace.load import find_trace_file, load_events, read_xspace

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
                    notes: list[str] | None = None, device=None) -> Analysis:
    """Parse, predict and compare one capture; build its report (with plots).

    ``model_flops``: the step's useful FLOPs over all devices (gives MFU); ``analytic_s``: the
    book's step time. ``book(chip) -> harness.analytic.Analytic`` supplies both for the chip.
    ``events``: the EVENTS to analyse when they do not come from ``cap``'s own trace (a
    multi-host run merges every process's); ``notes`` go into the report first. ``device``: the
    device (or device kind) that ran the capture, when not this process's first device.
    """
    entry, chip_notes, chip_meta = resolve_chip(chip, device)
    notes = list(notes or []) + chip_notes
    formula = est = None
    if book is not None:
        try:
            est = book(entry)
        except (ValueError, KeyError) as e:  # e.g. a mesh axis the chip's topology cannot hold
            notes.append(f"no workload-level prediction on {entry.name}: {e}")
        else:
            model_flops, analytic_s, formula = est.model_flops, est.analytic_s, est.formula
    events = load_events(cap.trace_dir, hlo_text=cap.hlo_text) if events is None else events
    measured = op_times(events)
    module = parse_module(cap.hlo_text)
    predicted = hlo_costs(module, entry)
    # the trace names an async op (``fusion-start.3`` in the HLO text) by the op it wraps
    renames = events.attrs.get("async_names") or {}
    if renames:
        predicted[schema.OP] = predicted[schema.OP].replace(renames)
    # The trace may hold other programs (e.g. a user's helper jits); compare the captured one.
    program = cap.program or (measured[schema.PROGRAM].iloc[0] if len(measured) else "")
    measured = measured[measured[schema.PROGRAM] == program]
    ops = compare(measured, predicted)
    cats = by_category(ops)
    devices = int(cap.meta.get("device_count", events[schema.DEVICE].nunique()))
    t_step = step_time(events[events[schema.PROGRAM] == program])
    summ = summary(ops, step_s=t_step, peak_flops_per_s=entry.flops_per_s(_peak_dtype(entry)),
                   devices=devices, model_flops=model_flops, analytic_s=analytic_s)
    if formula:
        summ["analytic_formula"] = formula
    if est is not None and est.flops_formula and summ.get(schema.MFU) is not None:
        summ[schema.MFU_FORMULA] = est.flops_formula
        if est.book_flops and t_step > 0:  # the book's 6P, printed beside it
            summ[schema.MFU_BOOK] = est.book_flops / (
                t_step * devices * entry.flops_per_s(_peak_dtype(entry)))
    for key in (schema.GRAPH_STEP_S, schema.WALL_STEP_S):
        if cap.meta.get(key) is not None:
            summ[key] = cap.meta[key]
    if cap.meta.get("graph_note"):
        notes.append(cap.meta["graph_note"])
    skip = cross_check_skip(module, cap.cost_analysis)
    check = cross_check(module, cap.cost_analysis) if not skip else {}
    if skip:
        notes.append(f"no cost_analysis cross-check: {skip}")
    elif check.get("flops_rel_diff") is not None:
        summ["flops_vs_cost_analysis"] = check["flops_rel_diff"]
        if check.get("loops"):  # XLA's analysis counts a loop body once
            summ["flops_vs_cost_analysis_loops_once"] = check["flops_loops_once_rel_diff"]
    beating = _beats_roofline(ops)
    if beating:
        notes.append(f"{beating} run faster than the {entry.name} roofline allows: the chip's "
                     "numbers are too low" + (" (a calibration taken under load? run `harness "
                                              "calibrate` on a quiet host)" if entry.kind == "cpu"
                                              else ""))
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


def _beats_roofline(ops: pd.DataFrame, margin: float = 1.25, min_share: float = 0.05) -> str:
    """The ops, by name, that take a visible share of the step and beat their roofline time by
    more than ``margin`` (efficiency > margin): a lower bound cannot be beaten, so the chip's
    numbers are wrong for this host. Empty when there are none."""
    fast = ops[(ops[schema.EFFICIENCY] > margin) & (ops[schema.SHARE] >= min_share)]
    if fast.empty:
        return ""
    names = ", ".join(fast[schema.OP].head(3))
    return f"{len(fast)} op(s) ({names}{', ...' if len(fast) > 3 else ''})"


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
    found = trace_hlo(space, saved.get("meta", {}).get("program", ""))
    if hlo is not None:
        text = Path(hlo).read_text()
    elif found:
        text = found[0]
    elif "hlo_text" in saved:
        text = saved["hlo_text"]
    else:
        raise HarnessError(f"{label}: the trace holds no HLO; give the program's optimized HLO "
                           f"with --hlo FILE (an XLA dump, *after_optimizations.txt)")
    events = load_events(trace_file, warmup_steps=warmup_steps, hlo_text=text)
    meta = dict(saved.get("meta", {}))
    meta.setdefault("program", parse_module(text).name)
    meta.setdefault("device_kind", device_kind(space))
    meta.setdefault("device_count", int(events[schema.DEVICE].nunique()))
    meta["trace"] = str(trace_file)
    cap = Capture(trace_dir=trace_file.parent, hlo_text=text,
                  cost_analysis=saved.get("cost_analysis", {}), meta=meta)
    return analyze_capture(cap, chip=chip, events=events,
                           device=meta.get("device_kind") or None, **kwargs)


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

