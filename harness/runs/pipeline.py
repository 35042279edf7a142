"""One path from a program to a Run: capture -> chip -> decode -> analyze -> Run.

Every entry point goes through ``from_capture``: ``harness run`` and ``sweep`` (a registered
workload, ``harness.runs.workload``), ``run --distributed`` (``harness.multihost``), the pytest
plugin, ``harness.analyze`` (``profile``: the user's own function) and ``harness trace``
(``analyze_trace``: a trace captured anywhere). The chip is resolved first (on a CPU host,
calibrated: ``harness.chip.resolve``), the trace decoded once and the program's HLO parsed once
(``decode``), then the pure ``harness.analysis.tables.analyze`` makes the tables.
"""
from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from google.protobuf.message import DecodeError

from harness import schema
from harness.analysis.programs import ProgramKey, chosen, program_name, programs_ran
from harness.analysis.tables import Context, analyze
from harness.capture.steps import CAPTURE_FILE, HLO_FILE, STEPS, Capture, capture
from harness.chip import drift
from harness.chip.resolve import chip_for_run
from harness.errors import HarnessError, UserError
from harness.explain import for_run, run_mesh
from harness.hlo import Module, parse_module, schedule
from harness.measure.ops import by_execution, op_times
from harness.runs.run import Run
from harness.trace import parallel
from harness.trace.device import trace_device
from harness.trace.hlo_proto import async_names, embedded_modules, module_text
from harness.trace.load import TraceEvents, find_trace_file, read_events, read_xspace

log = logging.getLogger(__name__)


@dataclass
class Decoded:
    """A trace decoded once, with the HLO of each program that ran parsed once: the XSpace
    (``space``, ``label`` for errors), its EVENTS, and (name, program id) -> module."""

    space: object
    label: str
    trace: TraceEvents
    modules: dict = field(default_factory=dict)
    damaged: list = field(default_factory=list)  # programs whose embedded HLO is damaged


def trace_program(space, program: str = "") -> tuple[str | None, dict[str, str]]:
    """(HLO text, async names) of the program named ``program`` in a decoded trace (default:
    its largest module); (None, {}) when the trace holds no HLO."""
    modules = embedded_modules(space)
    if not modules:
        return None, {}
    named = [k for k in modules if k[0] == program]
    key = named[0] if named else max(modules, key=lambda k: len(modules[k]))
    return module_text(modules[key]), async_names(modules[key])


class NoHlo(HarnessError):
    """The trace holds no HLO and none was given: it can be measured, not predicted."""


class _Embedded:
    """The trace's own HLO of each compilation, printed and parsed on first use, once."""

    def __init__(self, space):
        self.damaged: list[str] = []
        self.raw, self.parsed = embedded_modules(space, self.damaged), {}

    def get(self, key: ProgramKey) -> tuple[Module, dict] | None:
        """(module, async names) of one compilation: by (name, id), else by its name alone
        when the trace holds one compilation of it."""
        if key not in self.parsed:
            raw = self.raw.get(key)
            if raw is None:
                same = [k for k in self.raw if k[0] == key[0]]
                raw = self.raw[same[0]] if len(same) == 1 or not key[1] and same else None
            self.parsed[key] = self._parse(key, raw) if raw else None
        return self.parsed[key]

    def _parse(self, key: ProgramKey, raw: bytes) -> tuple[Module, dict] | None:
        try:
            return parse_module(module_text(raw)), async_names(raw)
        except (HarnessError, DecodeError) as e:  # damaged: that program is measured only
            log.warning("the HLO embedded for %s cannot be read: %s", program_name(key), e)
            self.damaged.append(program_name(key))
            return None


def decode(source, *, hlo_text: str | None = None, warmup_steps: int = 0,
           saved_hlo: str | None = None, label: str | None = None) -> Decoded:
    """Decode a trace (a path, a directory holding one, bytes or an XSpace, which ``label``
    names) and parse the HLO of each program that ran, each once: ``hlo_text`` for the program
    it names, else the trace's own, else ``saved_hlo`` (what ``harness`` saved beside it)."""
    space, read_label = read_xspace(source)
    label = label or read_label
    embedded = _Embedded(space)
    if parallel.started(space) and embedded.raw:  # workers are decoding: parse the largest
        embedded.get(max(embedded.raw, key=lambda k: len(embedded.raw[k])))  # program meanwhile
    text = hlo_text if hlo_text is not None else (saved_hlo if not embedded.raw else None)
    if text is None and not embedded.raw and not embedded.damaged:
        raise NoHlo(f"{label}: the trace holds no HLO; give the program's optimized HLO with "
                    f"--hlo FILE (an XLA dump, *after_optimizations.txt)")
    given = parse_module(text) if text is not None else None

    def module(key: ProgramKey) -> tuple[Module, dict] | None:
        if given is not None and key[0] == given.name:
            found = embedded.get(key)
            return given, (found[1] if found else {})
        return embedded.get(key)

    def schedule_of(name: str):
        found = module((name, ""))
        return schedule(*found) if found else None

    trace = read_events(space, warmup_steps=warmup_steps, schedule_of=schedule_of, label=label)
    ran = programs_ran(trace.events)
    if given is not None and not any(k[0] == given.name for k in ran):
        raise HarnessError(f"{label}: the HLO given is program {given.name}, which did not run "
                           f"in this trace; programs that ran: {_names(ran)}")
    modules = {key: found[0] for key in ran if (found := module(key)) is not None}
    return Decoded(space, label, trace, modules, embedded.damaged)


def _names(keys) -> str:
    return ", ".join(program_name(k) for k in keys) or "none"


def select(decoded: Decoded, program: str) -> str:
    """``program`` (a name or a program id) checked against the programs that ran; a one-line
    error naming them when it is none of them."""
    ran = programs_ran(decoded.trace.events)
    if not any(chosen(key, program) for key in ran):
        raise HarnessError(f"{decoded.label}: no program {program!r} ran; programs that ran "
                           f"(name(program id)): {_names(ran)}")
    return program


def from_capture(cap: Capture, *, chip=None, decoded: Decoded | None = None, workload=None,
                 meta: dict | None = None, notes: list[str] | tuple = (),
                 title: str | None = None, device=None, host_drift: dict | None = None,
                 trace: TraceEvents | None = None, program: str | None = None) -> Run:
    """The Run of one capture.

    ``chip``: a name or ``Chip`` (None: the device's, calibrated on a CPU host, with the
    host's ``host_drift`` around the capture divided out). ``workload``: the built workload
    (``harness.runs.workload.Built``), whose book estimate and expected collectives go into
    the analysis. ``meta`` is kept with the run; ``notes`` come first in its report.
    ``device``: the device (or kind, or a trace's ``harness.trace.device.Device``) that ran
    it, when not this process's first device.
    ``trace``: the EVENTS to analyse when they are not the capture's own trace (a multi-host
    run merges every process's). ``program``: the program (name or id) whose ops to report
    (default: the captured one; "" every program that ran).
    """
    entry, chip_notes, chip_meta = chip_for_run(chip, device, host_drift)
    notes = list(notes) + chip_notes
    if decoded is not None and decoded.damaged:
        notes.append(f"the trace's embedded HLO of {', '.join(decoded.damaged[:4])} is "
                     f"damaged: those programs are measured only")
    estimate = None
    if workload is not None:
        estimate, note = workload.estimate(entry)
        notes += [note] if note else []
    if decoded is None and trace is None:
        decoded = decode(cap.trace_dir, hlo_text=cap.hlo_text)
    events = trace if trace is not None else decoded.trace
    modules = decoded.modules if decoded is not None else {
        (cap.program, ""): parse_module(cap.hlo_text)}
    m = cap.meta
    ctx = Context(program=cap.program if program is None else program,
                  devices=m.get(schema.DEVICE_COUNT),
                  step_times_s=m.get(schema.STEP_TIMES_S) or (),
                  traced_step_times_s=m.get(schema.TRACED_STEP_TIMES_S) or (),
                  graph_step_s=m.get(schema.GRAPH_STEP_S), graph_note=m.get(schema.GRAPH_NOTE, ""),
                  cost_analysis=cap.cost_analysis, book=estimate,
                  expected_collectives=workload.expected_collectives() if workload else None,
                  memory={**m, **(meta or {})}, notes=notes)
    t = analyze(events, modules, entry, ctx)
    full_meta = dict(m, **(meta or {}), **chip_meta,
                     **{schema.CHIP: entry.name, schema.OP_TIMING: t.op_timing})
    full_meta.setdefault(schema.PROGRAM, t.program)
    if host_drift:  # kept whatever the chip: harness compare reads the host's speed from it
        full_meta.setdefault(drift.HOST_DRIFT, host_drift)
    devices = int(m.get(schema.DEVICE_COUNT, events.events[schema.DEVICE].nunique()))
    explained = for_run(modules, t.ops, t.step, run_mesh(full_meta))
    shown = len(t.ops.groupby([c for c in (schema.PROGRAM, schema.PROGRAM_ID)
                               if c in t.ops.columns]).size()) if len(t.ops) else 1
    what = t.program if shown <= 1 else f"{shown} programs ({t.program} the longest)"
    title = title or (f"{what} on {devices}x {m.get(schema.DEVICE_KIND, '?')} "
                      f"(predicted for {entry.name})")
    return Run(title=title, meta=full_meta, ops=t.ops, categories=t.categories,
               summary=t.summary, notes=t.notes, steps=t.steps, unexpected=t.unexpected,
               cross_check=t.cross_check, programs=t.programs, step=t.step,
               step_spans=t.step_spans, predicted_spans=t.predicted_spans, chip=entry,
               collectives=explained,
               capture=cap, trace=events)


def profile(fn: Callable, *args, chip=None, steps: int = STEPS, warmup: int = 2,
            out_dir: str | Path | None = None, carry: Callable | None = None,
            command_buffers: bool = False, keep_state: bool = False, **kwargs) -> Run:
    """Capture ``fn(*args, **kwargs)`` (jitted, any shardings) and analyse it per op: the
    ``harness.analyze`` of the README.

    Keyword arguments other than the harness's own go to ``fn`` (static ones too); it may run
    inside ``jax.set_mesh(mesh)`` or ``with mesh:``. ``chip``: predict for this chip (default:
    the chip the program runs on). The trace goes to ``out_dir`` (a temporary directory by
    default). ``carry(args, out) -> args`` threads a step's outputs into the next step's
    arguments; without it, inputs ``fn`` donates are copied afresh before each step. Warm-up
    lasts while the program compiles anew (outputs laid out otherwise than its inputs; a note
    says what changed). ``command_buffers=True``: on GPU, trace the executable with XLA's
    command buffers. ``run.save(dir)`` stores the result for ``harness compare``.

    ``fn`` runs ``warmup`` + 2 x ``steps`` times (``steps`` + 1 more on GPU): a Flax NNX module
    or optimizer among the arguments is updated in place by each call, as by as many training
    steps; ``keep_state=True`` steps clones of them (``nnx.clone``) and leaves the caller's as
    they were (inputs donated with ``carry`` given are consumed whatever it says). An error in
    the user's code is raised as one line naming their last frame (``errors.UserError``).
    """
    import jax

    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="harness-"))
    before = drift.probe(jax.local_devices())  # the host's speed around it, as run_built's
    try:
        cap = capture(fn, args, kwargs=kwargs, warmup=warmup, steps=steps, out_dir=out,
                      carry=carry, command_buffers=command_buffers, keep_state=keep_state)
    except UserError as e:
        raise e.with_traceback(None)  # theirs, in one line: not the harness's frames
    return from_capture(cap, chip=chip, notes=cap.notes,
                        host_drift=drift.record(before, drift.probe(jax.local_devices())))


def analyze_trace(path: str | Path, *, chip=None, hlo: str | Path | None = None,
                  warmup_steps: int = 0, space=None, workload=None, program: str = "",
                  mesh: dict | None = None) -> Run:
    """Analyse a profiler trace someone else captured (``jax.profiler``) per op.

    The program's optimized HLO comes from ``hlo`` (an XLA dump, ``*after_optimizations.txt``),
    else the trace itself (``/host:metadata``), else a ``module.hlo.txt`` saved beside it by
    ``harness``. ``chip``: predict for this chip (default: the trace's device). ``space``: the
    trace already decoded (by a caller that looked at it first). ``workload``: what
    ``from_capture`` takes, for a trace of a known workload (its book estimate). ``program``:
    report the compilation with this program id, or every compilation of this name (default:
    the program ``harness`` captured, for a trace it saved; else every program that ran).
    ``mesh``: the named mesh axes ({"X": 4, "Y": 2}) the collectives ran over, for a trace
    that does not record them (``harness.explain``).
    A directory whose newest trace has others beside it (one per host of a multi-host job,
    ``harness.trace.hosts``) is read as one job: every host's trace decoded in parallel,
    the first one's HLO, a ``host`` column and the per-host columns of a multi-host run.
    """
    from harness.measure import per_host
    from harness.trace import hosts

    trace_file = find_trace_file(path)
    found = hosts.host_traces(path)
    space, _ = read_xspace(trace_file if space is None else space)
    label = str(trace_file)
    saved = saved_beside(trace_file, Path(path))
    text = Path(hlo).read_text() if hlo is not None else None
    decoded = decode(space, hlo_text=text, warmup_steps=warmup_steps,
                     saved_hlo=saved.get("hlo_text"), label=label)
    program = select(decoded, program) or saved.get("meta", {}).get(schema.PROGRAM, "")
    events, layout = decoded.trace.events, decoded.trace.layout
    if len(found) > 1:  # one profile's traces of several hosts: one job's run
        events, processes = hosts.read_hosts(found, warmup_steps, {trace_file: events})
        # each host numbers its own compilations: programs are named by name alone
        events = events.assign(**{schema.PROGRAM_ID: ""})
        label = f"{trace_file.parent} ({len(found)} hosts)"
        decoded.trace = TraceEvents(events, hosts.MERGED, label)
        workload_meta = {"processes": processes}
    else:
        workload_meta = {}
    device = trace_device(space)  # the chip its device planes describe (harness.chip.resolve)
    meta = dict(saved.get("meta", {}))
    # a CPU trace has no device plane: its devices are the host's CPU
    meta.setdefault(schema.DEVICE_KIND, device.label if device else (
        "cpu" if layout == "cpu" else ""))
    meta.setdefault(schema.DEVICE_COUNT, int(events[schema.DEVICE].nunique()))
    meta[schema.TRACE_FILE] = str(trace_file)
    if mesh:
        meta[schema.MESH] = dict(mesh)
    meta.update(workload_meta)
    cap = Capture(trace_dir=trace_file.parent, hlo_text=text or saved.get("hlo_text", ""),
                  cost_analysis=saved.get("cost_analysis", {}), meta=meta, owned=False)
    run = from_capture(cap, chip=chip, decoded=decoded, workload=workload,
                       device=device or meta.get(schema.DEVICE_KIND) or None,
                       program=program)
    return per_host.with_host_columns(run, events) if workload_meta else run


def saved_beside(trace_file: Path, root: Path) -> dict:
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


def measured_only(source, warmup_steps: int = 0, label: str | None = None
                  ) -> tuple[TraceEvents, pd.DataFrame]:
    """A trace's EVENTS and measured OPS table, for a trace with neither HLO nor chip."""
    read = read_events(source, warmup_steps=warmup_steps, label=label)
    events = read.events
    if not read.stepped and len(events):  # no step markers: each execution is a step
        events = pd.concat([by_execution(g) for _, g in events.groupby(
            [schema.PROGRAM, schema.PROGRAM_ID], observed=True)], ignore_index=True)
    return read, op_times(events)
