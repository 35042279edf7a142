"""Run a jitted function under the XLA profiler: warm up, then trace N measured steps.

Each measured step runs inside ``jax.profiler.StepTraceAnnotation`` and is waited on before the next
starts, so steps never overlap. The trace starts and stops once per capture and records few host
events (``lean_profile_options``: Python tracer off, host tracer at level 1, which keeps the XLA
ops). After the trace, as many steps again run untraced: ``meta["step_times_s"]`` holds their wall
times, dispatch to outputs ready, on the host clock (``step_s`` is their median: a directly timed
step, whatever tracing costs), on CPU ``meta["step_cpu_times_s"]`` the CPU time the process spent
in each (every thread's: the work a CPU run did, whatever share of the host other processes left
it; on an accelerator it would be the host's dispatching and waiting, not the work), and
``meta["traced_step_times_s"]`` the traced steps' (their ratio is what tracing cost this run).
The compiled HLO text and ``cost_analysis()`` are saved next to the trace (``module.hlo.txt``,
``capture.json``) so that later stages can cost the same program that ran; its ``fingerprint``
goes into the meta.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import schema
from harness.capture import arguments, environment, memory
from harness.capture.driver import Steps, recompiled_note, settle, time_user_compile
from harness.capture.profiler import (  # noqa: F401 (re-exported: where callers found them)
    CAPTURE_FILE,
    HLO_FILE,
    LEAN_PROFILE,
    lean_profile_options,
    start_lean_trace,
)
from harness.capture.program import Program
from harness.errors import HarnessError, user_error
from harness.hlo.cost import cost_dict
from harness.units import json_text

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

log = logging.getLogger(__name__)

STEP_NAME = "step"
# Measured steps by default: 10 vs 10 steps let a U test reach p = 1.1e-5, enough to flag one op
# among a few hundred tested at once (5 vs 5 give at best 0.008; harness.regress.judge).
STEPS = 10
# Compiler options of the traced executable, per backend. GPU: no command buffers (CUDA graphs),
# whose kernels the profiler cannot tie to HLO ops; the user's own compile is timed beside it.
TRACE_COMPILE_OPTIONS: dict[str, dict[str, object]] = {
    "gpu": {"xla_gpu_enable_command_buffer": ""},
}


@dataclass
class Capture:
    """What one capture produced. ``meta`` is plain JSON-able data."""

    trace_dir: Path
    hlo_text: str
    cost_analysis: dict
    meta: dict = field(default_factory=dict)
    owned: bool = True  # trace_dir is the capture's own: a saved run takes it (else: a copy)
    notes: list[str] = field(default_factory=list)  # what the run's report should say of it

    @property
    def program(self) -> str:
        return self.meta.get(schema.PROGRAM, "")


def _cost_dict(compiled) -> dict:
    try:
        ca = compiled.cost_analysis()
    except Exception as e:  # some backends do not implement it
        log.warning("cost_analysis() unavailable: %s", e)
        return {}
    return {k: float(v) for k, v in (cost_dict(ca) or {}).items()}


def _module_name(hlo_text: str) -> str:
    first = hlo_text.split("\n", 1)[0]
    return first.split()[1].rstrip(",") if first.startswith("HloModule ") else ""


def trace_compile_options(backend: str, command_buffers: bool = False) -> dict[str, object]:
    """The compiler options of the executable to trace on ``backend`` (none: XLA's defaults).
    ``command_buffers=True`` keeps XLA's GPU command buffers (the production executable)."""
    options = dict(TRACE_COMPILE_OPTIONS.get(backend, {}))
    if command_buffers:
        options.pop("xla_gpu_enable_command_buffer", None)
    return options


def _commit(fn: Callable) -> dict:
    """The commit of the code that ran, asked of git once: for the harness's own programs
    (workloads, probes) and where ``fn``'s file is unknown, ``environment.git_state``'s (the
    working directory's checkout, else the harness's); for a user's function, the checkout
    holding its file ({} outside any: not the harness's, which did not write it)."""
    where = environment.source_dir(fn)
    if where is None or where.is_relative_to(environment.HARNESS_ROOT):
        return environment.git_state()
    return environment.git_state(where)


def capture(fn: Callable, args: Sequence, *, warmup: int = 2, steps: int = STEPS,
            out_dir: str | os.PathLike, mesh=None, kwargs: dict | None = None,
            carry: Callable | None = None, command_buffers: bool = False,
            keep_state: bool = False) -> Capture:
    """Compile ``fn(*args, **kwargs)``, run ``warmup`` untraced steps, then trace ``steps``.

    ``fn``: a ``jax.jit`` or ``nnx.jit`` function (static arguments by position or keyword),
    or a plain one (jitted here: ``harness.capture.program``). Warm-up lasts longer while the
    program compiles anew (a step whose outputs come back with other shardings than its
    inputs): the compilation it settles on is traced, and ``Capture.notes`` say what changed
    (``driver.settle``). ``carry(args, out) -> args`` feeds a step's outputs into the next
    step's arguments (a training step that returns new parameters); without it every step
    reuses ``args``, and a function that donates inputs gets fresh copies of them before each
    step (``driver.Steps``). Flax NNX modules and optimizers among the arguments are updated in
    place by every step, warm-up included, as by the user's own loop; ``keep_state=True``
    steps clones of them instead (``arguments.own_copies``). An exception from the user's
    code is raised as a one-line ``UserError`` naming their last frame.
    On GPU the traced executable is compiled without command buffers (``TRACE_COMPILE_OPTIONS``)
    and the user's own compile is timed as well (``meta["graph_step_s"]``);
    ``command_buffers=True`` traces the default executable instead.
    """
    import jax

    if steps < 1 or warmup < 0:
        raise HarnessError(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    args, kwargs = tuple(args), dict(kwargs or {})
    state = arguments.mutable_state(args, kwargs)
    if keep_state:
        args, kwargs = arguments.own_copies(args, kwargs)
    program = Program(fn, args, kwargs)
    try:
        cap = _capture(program, args, kwargs, warmup, steps, out, mesh, carry,
                       trace_compile_options(jax.default_backend(), command_buffers))
    except Exception as e:
        err = user_error(e, program.name)
        if err is None:
            raise
        raise err from None
    if schema.HOST_DEVICE_COUNT in cap.meta:
        cap.notes.append(f"the program ran on {cap.meta[schema.DEVICE_COUNT]} of this process's "
                         f"{cap.meta[schema.HOST_DEVICE_COUNT]} devices")
    if state and not keep_state:
        cap.notes.append(f"the step updates its arguments in place ({', '.join(state)}): the "
                         f"harness ran it {cap.meta[schema.STEPS_RUN]} times, which advanced "
                         f"them as many steps (keep_state=True steps copies instead)")
    return cap


def _capture(program: Program, args: tuple, kwargs: dict, warmup: int, steps: int, out: Path,
             mesh, carry: Callable | None, options: dict) -> Capture:
    """``capture`` once the program is known: compile, settle, trace, time, save."""
    import jax

    log.info("compiling")
    exes = [program.executable(args, kwargs, options)]
    need, have = memory.check_fits(exes[0].compiled)  # refuse before running what cannot fit

    def recompile(a: tuple, kw: dict):
        exes.append(program.executable(a, kw, options))
        memory.check_fits(exes[-1].compiled)
        return exes[-1].call

    run = Steps(exes[0].call, args, kwargs, carry,
                None if carry else arguments.donated_copies(exes[0].lowered))
    run, changed = settle(run, warmup, recompile, program.names)
    exe = exes[-1]
    log.info("tracing %d steps into %s", steps, out)
    traced, stop_s = _traced(run, steps, out)
    cpu_times: list[float] | None = [] if jax.default_backend() == "cpu" else None
    step_times = run.times(steps, cpu_times)
    timing = {}
    if exe.options:  # the executable traced is not the user's: time theirs too
        timing = time_user_compile(program.own, statistics.median(step_times), run, steps)
    hlo_text = exe.compiled.as_text()
    meta = environment.environment()
    name = _module_name(hlo_text)
    meta.update({schema.PROGRAM: name, schema.WARMUP: warmup,
                 schema.HLO_FINGERPRINTS: {name: environment.fingerprint(hlo_text)},
                 schema.STEPS: steps, schema.COMPILER_OPTIONS: exe.options,
                 schema.STEP_TIMES_S: step_times,
                 **({schema.STEP_CPU_TIMES_S: cpu_times} if cpu_times is not None else {}),
                 schema.TRACED_STEP_TIMES_S: traced,
                 schema.TRACE_STOP_S: stop_s, **timing,
                 schema.MEMORY_NEEDED_BYTES: need, schema.MEMORY_CAPACITY_BYTES: have,
                 schema.TIME: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                 schema.STEPS_RUN: run.ran[0], **_commit(program.jitted)})
    # harness.explain names parameters by them: those JAX left unnamed (jax.Ref state) by
    # number, an nnx.jit program's (model.states[0][3]) by JAX's name -> NNX path
    paths = (arguments.nnx_names(program.jitted, exe.lowered, args, kwargs)
             or arguments.argument_paths(exe.lowered, program.names))
    if paths:
        meta[schema.ARGUMENT_PATHS] = {name: paths}
    used = _devices(exe.compiled)
    if used and used != meta[schema.DEVICE_COUNT]:  # the program's devices, not the process's
        meta[schema.HOST_DEVICE_COUNT], meta[schema.DEVICE_COUNT] = meta[schema.DEVICE_COUNT], used
    mesh = mesh if mesh is not None else arguments.args_mesh(run.args, kwargs)
    if mesh is not None:
        meta[schema.MESH] = {str(k): int(v) for k, v in dict(mesh.shape).items()}
    cost = _cost_dict(exe.compiled)
    (out / HLO_FILE).write_text(hlo_text)
    (out / CAPTURE_FILE).write_text(json_text({"meta": meta, "cost_analysis": cost}, indent=2))
    notes = [recompiled_note(program.name, changed)] if changed else []
    return Capture(trace_dir=out, hlo_text=hlo_text, cost_analysis=cost, meta=meta,
                   notes=notes)


def _devices(compiled) -> int | None:
    """The devices the compiled program runs on: those its inputs' and outputs' shardings
    name (None where the executable says none)."""
    import jax

    found = set()
    for side in ("input_shardings", "output_shardings"):
        try:  # jax 0.10 fails to unflatten a program's outputs where it takes jax.Refs
            shardings = getattr(compiled, side, None)
        except ValueError:
            continue
        for s in jax.tree.leaves(shardings):
            found |= set(getattr(s, "device_set", ()))
    return len(found) or None


def _traced(run: Steps, steps: int, out: Path) -> tuple[list[float], float]:
    """``steps`` steps traced into ``out``, each in a ``StepTraceAnnotation``: their wall
    times, and the seconds ``stop_trace`` took."""
    import jax

    traced = []
    start_lean_trace(out)
    try:
        for i in range(steps):
            a = run.next_args()
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                t0 = time.perf_counter()
                res = run.call(a)
                traced.append(time.perf_counter() - t0)
            run.done(a, res)
    finally:
        t0 = time.perf_counter()
        jax.profiler.stop_trace()
        stop_s = time.perf_counter() - t0
    return traced, stop_s
