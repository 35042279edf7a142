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
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import schema
from harness.capture import environment, memory
from harness.capture.profiler import (  # noqa: F401 (re-exported: where callers found them)
    CAPTURE_FILE,
    LEAN_PROFILE,
    lean_profile_options,
    start_lean_trace,
)
from harness.errors import HarnessError, one_line
from harness.hlo.cost import cost_dict
from harness.units import fmt_seconds

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

log = logging.getLogger(__name__)

HLO_FILE = "module.hlo.txt"
STEP_NAME = "step"
# Measured steps by default: 10 vs 10 steps let a U test reach p = 1.1e-5, enough to flag one op
# among a few hundred tested at once (5 vs 5 give at best 0.008; harness.regress.judge).
STEPS = 10
# Compiler options of the traced executable, per backend. GPU: no command buffers (CUDA graphs),
# whose kernels the profiler cannot tie to HLO ops; the user's own compile is timed beside it.
TRACE_COMPILE_OPTIONS: dict[str, dict[str, object]] = {
    "gpu": {"xla_gpu_enable_command_buffer": ""},
}
GRAPH_DIFF_NOTE = 0.05  # note when the user's executable's step differs by more than this


@dataclass
class Capture:
    """What one capture produced. ``meta`` is plain JSON-able data."""

    trace_dir: Path
    hlo_text: str
    cost_analysis: dict
    meta: dict = field(default_factory=dict)
    owned: bool = True  # trace_dir is the capture's own: a saved run takes it (else: a copy)

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


def _compile(lowered, options: dict):
    """``lowered.compile`` with ``options``; XLA's defaults (with a warning) if refused."""
    if not options:
        return lowered.compile(), {}
    try:
        return lowered.compile(compiler_options=options), options
    except Exception as e:  # noqa: BLE001 - an option this jaxlib does not know
        log.warning("compiling with %s failed (%s); tracing XLA's default executable",
                    options, one_line(e))
        return lowered.compile(), {}


class _Steps:
    """One step at a time of a compiled program: the arguments of each step, the call (the
    timed part: dispatch to outputs ready), and the next step's arguments. ``carry(args, out)``
    threads a step's outputs into them; without it, a program that donates inputs gets fresh
    copies of the donated arguments before each step, made outside the timed part (a donated
    buffer is gone after the step that took it), and every other program reuses ``args``."""

    def __init__(self, compiled, args: tuple, kwargs: dict, carry: Callable | None, fresh):
        self.compiled, self.args, self.kwargs = compiled, args, kwargs
        self.carry, self.fresh = carry, fresh

    def with_program(self, compiled) -> _Steps:
        return _Steps(compiled, self.args, self.kwargs, self.carry, self.fresh)

    def next_args(self) -> tuple:
        return self.fresh(self.args) if self.fresh else self.args

    def call(self, a: tuple):
        import jax

        res = self.compiled(*a, **self.kwargs)
        jax.block_until_ready(res)
        return res

    def done(self, a: tuple, res) -> None:
        if self.carry:
            self.args = self.carry(a, res)

    def times(self, steps: int, cpu: list | None = None) -> list[float]:
        """Wall times of ``steps`` untraced steps, each waited on; each step's process CPU time
        appended to ``cpu`` when given."""
        out = []
        for _ in range(steps):
            a = self.next_args()
            c0, t0 = time.process_time(), time.perf_counter()
            res = self.call(a)
            out.append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.append(time.process_time() - c0)
            self.done(a, res)
        return out


def donated_copies(lowered) -> Callable[[tuple], tuple] | None:
    """A function giving fresh copies of the arguments ``lowered`` donates (``donate_argnums``),
    the others as they are; None when it donates none."""
    import jax
    import jax.numpy as jnp

    info = getattr(lowered, "args_info", None)
    info = info[0] if isinstance(info, tuple) and len(info) == 2 else info  # (args, kwargs)
    flags = [bool(getattr(i, "donated", False)) for i in jax.tree.leaves(info)]
    if not any(flags):
        return None

    def fresh(args: tuple) -> tuple:
        leaves, tree = jax.tree.flatten(args)
        if len(leaves) != len(flags):  # not the structure lowered: copy every array
            return jax.tree.map(jnp.copy, args)
        return tree.unflatten([jnp.copy(x) if d else x for x, d in zip(leaves, flags)])

    return fresh


def _time_user_compile(lowered, step_s: float, steps_of: _Steps, steps: int) -> dict:
    """The step time of the user's own compile (XLA's defaults), timed as ``step_s`` was (the
    traced executable's untraced steps), and a note when they differ by more than
    GRAPH_DIFF_NOTE."""
    own = steps_of.with_program(lowered.compile())
    own.times(1)  # warm up
    graph_s = statistics.median(own.times(steps))
    steps_of.args = own.args
    out = {schema.GRAPH_STEP_S: graph_s}
    if step_s > 0 and abs(graph_s / step_s - 1) > GRAPH_DIFF_NOTE:
        out[schema.GRAPH_NOTE] = (f"the executable as compiled by default (command buffers on) "
                                  f"steps in {fmt_seconds(graph_s)} against "
                                  f"{fmt_seconds(step_s)} for the traced one "
                                  f"({graph_s / step_s - 1:+.0%})")
    return out


def args_mesh(args: Sequence, kwargs: dict):
    """The mesh the arguments are laid out on (the first ``NamedSharding`` over more than one
    device among their leaves): its named axes say which axes a collective runs over
    (``harness.explain``); None where no argument names one."""
    import jax
    from jax.sharding import NamedSharding

    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            return sharding.mesh
    return None


def capture(fn: Callable, args: Sequence, *, warmup: int = 2, steps: int = STEPS,
            out_dir: str | os.PathLike, mesh=None, kwargs: dict | None = None,
            carry: Callable | None = None, command_buffers: bool = False) -> Capture:
    """Compile ``fn(*args, **kwargs)``, run ``warmup`` untraced steps, then trace ``steps``.

    ``carry(args, out) -> args`` feeds a step's outputs into the next step's arguments (a
    training step that returns new parameters); without it every step reuses ``args``, and a
    function that donates inputs gets fresh copies of them before each step (``_Steps``).
    On GPU the traced executable is compiled without command buffers (``TRACE_COMPILE_OPTIONS``)
    and the user's own compile is timed as well (``meta["graph_step_s"]``);
    ``command_buffers=True`` traces the default executable instead.
    """
    import jax

    if steps < 1 or warmup < 0:
        raise HarnessError(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    kwargs = dict(kwargs or {})
    log.info("compiling")
    lowered = jitted.lower(*args, **kwargs)
    compiled, options = _compile(lowered,
                                 trace_compile_options(jax.default_backend(), command_buffers))
    need, have = memory.check_fits(compiled)  # refuse before running what cannot fit
    hlo_text = compiled.as_text()
    run = _Steps(compiled, tuple(args), kwargs, carry,
                 None if carry else donated_copies(lowered))
    run.times(warmup)
    log.info("tracing %d steps into %s", steps, out)
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
    cpu_times: list[float] | None = [] if jax.default_backend() == "cpu" else None
    step_times = run.times(steps, cpu_times)
    timing = {}
    if options:  # the executable traced is not the user's: time theirs too
        timing = _time_user_compile(lowered, statistics.median(step_times), run, steps)

    meta = environment.environment()
    name = _module_name(hlo_text)
    meta.update({schema.PROGRAM: name, schema.WARMUP: warmup,
                 schema.HLO_FINGERPRINTS: {name: environment.fingerprint(hlo_text)},
                 schema.STEPS: steps, schema.COMPILER_OPTIONS: options,
                 schema.STEP_TIMES_S: step_times,
                 **({schema.STEP_CPU_TIMES_S: cpu_times} if cpu_times is not None else {}),
                 schema.TRACED_STEP_TIMES_S: traced,
                 schema.TRACE_STOP_S: stop_s, **timing,
                 schema.MEMORY_NEEDED_BYTES: need, schema.MEMORY_CAPACITY_BYTES: have,
                 schema.TIME: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    mesh = mesh if mesh is not None else args_mesh(args, kwargs or {})
    if mesh is not None:
        meta[schema.MESH] = {str(k): int(v) for k, v in dict(mesh.shape).items()}
    cost = _cost_dict(compiled)
    (out / HLO_FILE).write_text(hlo_text)
    (out / CAPTURE_FILE).write_text(json.dumps({"meta": meta, "cost_analysis": cost}, indent=2))
    return Capture(trace_dir=out, hlo_text=hlo_text, cost_analysis=cost, meta=meta)
