"""One path from a program to a Run: capture -> chip -> decode -> derive -> Run.

Every entry point goes through ``from_capture``: ``harness run`` and ``sweep`` (a registered
workload, ``harness.runs.workload``), ``run --distributed`` (``harness.multihost``), the pytest
plugin, ``harness.analyze`` (``analyze``: the user's own function) and ``harness trace``
(``analyze_trace``: a trace captured anywhere, found by ``harness.trace.located``). The chip is
resolved first (on a CPU host, calibrated: ``harness.chip.resolve``), the trace decoded once and
the program's HLO parsed once (``harness.trace.decode``), then the pure
``harness.analysis.tables.derive`` makes the tables, which are the Run's (``Run.of``).
``NoHlo``, ``trace_program`` and ``saved_beside`` are read from their stages' modules
(``harness.trace.decode``, ``harness.trace.hlo_proto``, ``harness.trace.located``), where
``harness.commands`` and ``harness.runs.explained`` import them.
"""
from __future__ import annotations

import shutil
import tempfile
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness import schema
from harness.analysis.mesh import run_mesh
from harness.analysis.tables import Context, derive
from harness.capture.environment import git_state
from harness.capture.memory import OutOfMemory, is_oom
from harness.capture.steps import STEPS, Capture, capture
from harness.chip import drift
from harness.chip.network import describe as describe_network
from harness.chip.network import resolve as resolve_network
from harness.chip.resolve import chip_for_run
from harness.errors import UserError
from harness.explain import for_run
from harness.explain.meshes import program_meshes
from harness.hlo import parse_module
from harness.measure.ops import by_execution, op_times
from harness.measure.per_host import with_host_columns
from harness.measure.programs import program_name
from harness.memory import oom
from harness.memory.peaks import measured_peak
from harness.memory.report import of_function
from harness.record import Run
from harness.trace.decode import Decoded, decode, select
from harness.trace.hosts import MERGED
from harness.trace.load import TraceEvents, read_events
from harness.trace.located import Located, locate


def from_capture(cap: Capture, *, chip=None, decoded: Decoded | None = None, workload=None,
                 meta: dict | None = None, notes: list[str] | tuple = (),
                 title: str | None = None, device=None, host_drift: dict | None = None,
                 trace: TraceEvents | None = None, program: str | None = None,
                 network=None) -> Run:
    """The Run of one capture.

    ``chip``: a name or ``Chip`` (None: the device's, calibrated on a CPU host, with the
    host's ``host_drift`` around the capture divided out). ``workload``: the built workload
    (``harness.runs.workload.Built``), whose book estimate and expected collectives go into
    the analysis. ``meta`` is kept with the run; ``notes`` come first in its report.
    ``device``: the device (or kind, or a trace's ``harness.trace.device.Device``) that ran
    it, when not this process's first device.
    ``trace``: the EVENTS to analyse when they are not the capture's own trace (a multi-host
    run merges every process's: its ops get the per-host columns). ``program``: the program
    (name, id or ``all``) whose ops to report (default: the captured one; "" the step program).
    ``network``: the network past one node or slice the user declared
    (``harness.chip.network.Declared``), which prices each collective at the levels it crosses.
    """
    entry, chip_notes, chip_meta = chip_for_run(chip, device, host_drift)
    notes = list(notes) + chip_notes
    system = (resolve_network(network, entry, cap.meta.get(schema.DEVICE_COUNT))
              if network is not None else None)
    if system is not None:
        notes.append(describe_network(system))
    if decoded is not None and decoded.damaged:
        notes.append(f"the trace's embedded HLO of {', '.join(decoded.damaged[:4])} is "
                     f"damaged: those programs are measured only")
    estimate = None
    if workload is not None:
        estimate, note = workload.estimate(entry)
        notes += [note] if note else []
    if decoded is None and trace is None:
        decoded = decode(locate(cap.trace_dir), hlo_text=cap.hlo_text)
    events = trace if trace is not None else decoded.analysed
    modules = decoded.modules if decoded is not None else {
        (cap.program, ""): parse_module(cap.hlo_text)}
    m = cap.meta
    ctx = Context(program=cap.program if program is None else program,
                  mesh=run_mesh({**m, **(meta or {})}), devices=m.get(schema.DEVICE_COUNT),
                  step_times_s=m.get(schema.STEP_TIMES_S) or (),
                  traced_step_times_s=m.get(schema.TRACED_STEP_TIMES_S) or (),
                  graph_step_s=m.get(schema.GRAPH_STEP_S), graph_note=m.get(schema.GRAPH_NOTE, ""),
                  cost_analysis=cap.cost_analysis, book=estimate,
                  expected_collectives=workload.expected_collectives() if workload else None,
                  memory={**m, **(meta or {})}, notes=notes, system=system,
                  arguments={**m, **(meta or {})}.get(schema.ARGUMENT_PATHS))
    t = derive(events, modules, entry, ctx)
    if events.format == MERGED:  # a job's EVENTS: the per-host columns, and the largest skew
        t = with_host_columns(t, events.events)
    # the tables' meta: how ops were timed, the program the step line and summary are of
    full_meta = {**m, **(meta or {}), **chip_meta, schema.CHIP: entry.name, **t.meta}
    if host_drift:  # kept whatever the chip: harness compare reads the host's speed from it
        full_meta.setdefault(drift.HOST_DRIFT, host_drift)
    devices = int(m.get(schema.DEVICE_COUNT, events.events[schema.DEVICE].nunique()))
    mesh = run_mesh(full_meta)
    named, mesh_notes = program_meshes(modules, full_meta, events.events)
    main = (t.meta.get(schema.PROGRAM, ""), t.meta.get(schema.PROGRAM_ID, ""))
    explained = for_run(modules, t.ops, t.step, mesh, main=main,
                        program_meshes=named, arguments=full_meta.get(schema.ARGUMENT_PATHS),
                        system=system)
    shown = len(t.ops.groupby([c for c in (schema.PROGRAM, schema.PROGRAM_ID)
                               if c in t.ops.columns]).size()) if len(t.ops) else 1
    what = main[0] if shown <= 1 else f"{shown} programs (step program {program_name(main)})"
    title = title or (f"{what} on {devices}x {m.get(schema.DEVICE_KIND, '?')} "
                      f"(predicted for {entry.name})")
    return Run.of(t, title=title, meta=full_meta, notes=t.notes + mesh_notes,
                  collectives=explained, chip=entry, capture=cap, trace=events, modules=modules)


def analyze(fn: Callable, *args, chip=None, steps: int = STEPS, warmup: int = 2,
            out_dir: str | Path | None = None, carry: Callable | None = None,
            command_buffers: bool = False, keep_state: bool = False, memory: bool = False,
            **kwargs) -> Run:
    """Capture ``fn(*args, **kwargs)`` (jitted, any shardings) and analyse it per op: the
    ``harness.analyze`` of the README.

    Keyword arguments other than the harness's own go to ``fn`` (static ones too); it may run
    inside ``jax.set_mesh(mesh)`` or ``with mesh:``. ``chip``: predict for this chip (default:
    the chip the program runs on). The trace goes to ``out_dir``, else to a temporary
    directory that lives as long as the Run (removed when it is garbage-collected, or at exit:
    ``run.save`` stores the trace while it lives). ``carry(args, out) -> args`` threads a
    step's outputs into the next step's arguments; without it, inputs ``fn`` donates are
    copied afresh before each step. Warm-up lasts while the program compiles anew (outputs laid
    out otherwise than its inputs; a note says what changed). ``command_buffers=True``: on
    GPU, trace the executable with XLA's command buffers. ``run.save(dir)`` stores the result
    for ``harness compare``. ``memory=True``: the report's memory section (issue 56), from one
    more compile with XLA's dump (``harness.memory.report.of_function``; no book model).

    ``fn`` runs ``warmup`` + 2 x ``steps`` times (``steps`` + 1 more on GPU): a Flax NNX module
    or optimizer among the arguments is updated in place by each call, as by as many training
    steps; ``keep_state=True`` steps clones of them (``nnx.clone``) and leaves the caller's as
    they were (inputs donated with ``carry`` given are consumed whatever it says). An error in
    the user's code is raised as one line naming their last frame (``errors.UserError``).
    """
    import jax

    temporary = out_dir is None
    out = Path(tempfile.mkdtemp(prefix="harness-")) if temporary else Path(out_dir)
    try:
        before = drift.probe(jax.local_devices())  # the host's speed around it, as run_built's
        # compiled before the steps run, while the arguments are the caller's (donated ones too)
        held = of_function(fn, args, kwargs, jax.local_devices()) if memory else None
        try:
            cap = capture(fn, args, kwargs=kwargs, warmup=warmup, steps=steps, out_dir=out,
                          carry=carry, command_buffers=command_buffers, keep_state=keep_state)
        except UserError as e:
            raise e.with_traceback(None)  # theirs, in one line: not the harness's frames
        except Exception as e:  # out of memory: the would-be peak, what holds it, remedies
            if not isinstance(e, OutOfMemory) and not is_oom(e):
                raise
            raise oom.for_function(fn, args, kwargs, jax.local_devices(), e, held) from None
        run = from_capture(cap, chip=chip, notes=cap.notes,
                           host_drift=drift.record(before, drift.probe(jax.local_devices())))
        if memory:
            _with_memory(run, held, jax.local_devices())
    except BaseException:
        if temporary:
            shutil.rmtree(out, ignore_errors=True)
        raise
    if temporary:  # the run's own (run.save moves it into the stored run)
        weakref.finalize(run, shutil.rmtree, str(out), ignore_errors=True)
    return run


def _with_memory(run: Run, report, devices) -> None:
    """The run's memory section (``schema.MEMORY``), the allocator's peak measured after the
    steps; a note for a program compiled already, which cannot be compiled with the dump."""
    if report is None:
        run.notes.append("memory: a compiled program is not compiled again with XLA's dump; "
                         "pass the jitted function for the memory section")
        return
    report.measured, report.measured_note = measured_peak(list(devices))
    run.meta[schema.MEMORY] = report.to_dict()


def profile(fn: Callable, *args, **kwargs) -> Run:
    """Deprecated (one release): ``analyze``, this function's name since 0.1 (``profile``
    names ``harness profile``, which runs a script)."""
    warnings.warn("harness.runs.pipeline.profile is deprecated: use harness.analyze",
                  DeprecationWarning, stacklevel=2)
    return analyze(fn, *args, **kwargs)


def analyze_trace(path: str | Path, *, chip=None, hlo: str | Path | None = None,
                  warmup_steps: int = 0, space=None, workload=None, program: str = "",
                  mesh: dict | None = None, network=None, host_drift: dict | None = None
                  ) -> Run:
    """Analyse a profiler trace someone else captured (``jax.profiler``) per op.

    The program's optimized HLO comes from ``hlo`` (an XLA dump, ``*after_optimizations.txt``),
    else the trace itself (``/host:metadata``), else a ``module.hlo.txt`` saved beside it by
    ``harness``. ``chip``: predict for this chip (default: the trace's device). ``space``: the
    trace already decoded (by a caller that looked at it first). ``workload``: what
    ``from_capture`` takes, for a trace of a known workload (its book estimate). ``program``:
    report the compilation with this program id, every compilation of this name, or ``all``
    (default: the program ``harness`` captured, for a trace it saved; else the step program,
    ``harness.analysis.programs.step_program``).
    ``mesh``: the named mesh axes ({"X": 4, "Y": 2}) the collectives ran over, for a trace
    that does not record them (``harness.explain``); ``network``: the network declared past
    one node or slice (``from_capture``); ``host_drift``: the host's speed measured around a
    capture made in this process (``from_capture``).
    A directory whose newest trace has others beside it (one per host of a multi-host job,
    ``harness.trace.hosts``) is read as one job: every host's trace decoded in parallel,
    the first one's HLO, a ``host`` column and the per-host columns of a multi-host run; one
    holding a trace in segments (``harness profile``), as one trace (``harness.trace.segments``).
    Each stage once, in order: the trace found (``locate``), decoded with its programs' HLO
    (``harness.trace.decode``), the program asked for checked, then ``from_capture``.
    """
    found = locate(path, space)
    text = Path(hlo).read_text() if hlo is not None else None
    decoded = decode(found, hlo_text=text, warmup_steps=warmup_steps)
    program = select(decoded, program) or found.meta.get(schema.PROGRAM, "")
    meta = _trace_meta(found, decoded, mesh)
    cap = Capture(trace_dir=found.file.parent, hlo_text=text or found.saved.get("hlo_text", ""),
                  cost_analysis=found.saved.get("cost_analysis", {}), meta=meta, owned=False)
    # the chip its device planes describe (harness.chip.resolve), else the kind it names
    return from_capture(cap, chip=chip, decoded=decoded, workload=workload,
                        device=found.device or meta.get(schema.DEVICE_KIND) or None,
                        program=program, notes=found.notes, network=network,
                        host_drift=host_drift)


def _trace_meta(found: Located, decoded: Decoded, mesh: dict | None) -> dict:
    """The meta of a trace's run: what ``harness`` saved with it (else the commit of this
    checkout), what the trace says of its devices, the trace's file, the mesh given and, for a
    job's traces, each host's record."""
    # the commit: the one its capture took (a harness-made trace's), else this checkout's, which
    # analyses it
    meta = {**git_state(), **found.meta}
    # a CPU trace has no device plane: its devices are the host's CPU
    meta.setdefault(schema.DEVICE_KIND, found.device.label if found.device else (
        "cpu" if decoded.trace.format == "cpu" else ""))
    meta.setdefault(schema.DEVICE_COUNT, int(decoded.analysed.events[schema.DEVICE].nunique()))
    meta[schema.TRACE_FILE] = str(found.file)
    if mesh:
        meta[schema.MESH] = dict(mesh)
    if decoded.processes:
        meta["processes"] = decoded.processes
    return meta


def measured_only(source, warmup_steps: int = 0, label: str | None = None
                  ) -> tuple[TraceEvents, pd.DataFrame]:
    """A trace's EVENTS and measured OPS table, for a trace with neither HLO nor chip."""
    read = read_events(source, warmup_steps=warmup_steps, label=label)
    events = read.events
    if not read.stepped and len(events):  # no step markers: each execution is a step
        events = pd.concat([by_execution(g) for _, g in events.groupby(
            [schema.PROGRAM, schema.PROGRAM_ID], observed=True)], ignore_index=True)
    return read, op_times(events)
