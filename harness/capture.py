"""Run a jitted function under the XLA profiler: warm up, then trace N measured steps.

Each measured step runs inside ``jax.profiler.StepTraceAnnotation`` and is waited on before the
next starts, so steps never overlap. The trace starts and stops once per capture and records few
host events (``lean_profile_options``: Python tracer off, host tracer at level 1, which keeps
the XLA ops). After the trace, as many steps again run untraced: ``meta["step_times_s"]`` holds
their wall times, dispatch to outputs ready, on the host clock (``step_s`` is their median: a
directly timed step, whatever tracing costs), and ``meta["traced_step_times_s"]`` the traced
steps' (their ratio is what tracing cost this run). The compiled HLO text and ``cost_analysis()`` are saved next
to the trace (``module.hlo.txt``, ``capture.json``) so that later stages can cost the same program
that ran.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata as _md
from pathlib import Path

from harness.errors import HarnessError

log = logging.getLogger(__name__)

HLO_FILE = "module.hlo.txt"
CAPTURE_FILE = "capture.json"
STEP_NAME = "step"


@dataclass
class Capture:
    """What one capture produced. ``meta`` is plain JSON-able data."""

    trace_dir: Path
    hlo_text: str
    cost_analysis: dict
    meta: dict = field(default_factory=dict)

    @property
    def program(self) -> str:
        return self.meta.get("program", "")


def _version(dist: str) -> str:
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return ""


def environment(devices: Sequence | None = None) -> dict:
    """Backend, devices and versions of the running process (jax imported here)."""
    import jax

    devices = list(devices) if devices is not None else jax.devices()
    return {
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind if devices else "",
        "platform": devices[0].platform if devices else "",
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "jax_version": jax.__version__,
        "jaxlib_version": _version("jaxlib"),
        "xprof_version": _version("xprof"),
        "host": platform.node(),
        "python": platform.python_version(),
    }


def _cost_dict(compiled) -> dict:
    try:
        ca = compiled.cost_analysis()
    except Exception as e:  # some backends do not implement it
        log.warning("cost_analysis() unavailable: %s", e)
        return {}
    if isinstance(ca, (list, tuple)):  # older jax returned one dict per program
        ca = ca[0] if ca else {}
    return {k: float(v) for k, v in (ca or {}).items()}


# ProfileOptions fields (jax.profiler, jax 0.4.3x on) that make a trace cheap; a jax without a
# field, or without ProfileOptions, traces with its defaults. Host tracer level 1 still records
# the CPU runtime's per-op events and the step annotations; level 0 loses the ops.
LEAN_PROFILE = {"python_tracer_level": 0, "host_tracer_level": 1}


def lean_profile_options():
    """``jax.profiler.ProfileOptions`` set to ``LEAN_PROFILE`` (None where jax has none)."""
    import jax

    make = getattr(jax.profiler, "ProfileOptions", None)
    if make is None:
        return None
    opts = make()
    for name, value in LEAN_PROFILE.items():
        if hasattr(opts, name):
            setattr(opts, name, value)
    return opts


def start_lean_trace(out: Path) -> None:
    """Start the profiler into ``out`` with ``lean_profile_options`` where jax accepts them."""
    import jax

    opts = lean_profile_options()
    if opts is not None:
        try:
            jax.profiler.start_trace(str(out), profiler_options=opts)
            return
        except TypeError:  # a start_trace without profiler_options
            log.debug("start_trace takes no profiler_options; tracing with defaults")
    jax.profiler.start_trace(str(out))


def _module_name(hlo_text: str) -> str:
    first = hlo_text.split("\n", 1)[0]
    return first.split()[1].rstrip(",") if first.startswith("HloModule ") else ""


def capture(fn: Callable, args: Sequence, *, warmup: int = 2, steps: int = 5,
            out_dir: str | os.PathLike, mesh=None,
            carry: Callable | None = None) -> Capture:
    """Compile ``fn(*args)``, run ``warmup`` untraced steps, then trace ``steps`` steps.

    ``carry(args, out) -> args`` feeds a step's outputs into the next step's arguments (a
    training step that returns new parameters); by default every step reuses ``args``.
    """
    import jax

    if steps < 1 or warmup < 0:
        raise HarnessError(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    log.info("compiling")
    compiled = jitted.lower(*args).compile()
    hlo_text = compiled.as_text()
    args = tuple(args)

    def one_step(a):
        res = compiled(*a)
        jax.block_until_ready(res)
        return carry(a, res) if carry else a

    for _ in range(warmup):
        args = one_step(args)
    log.info("tracing %d steps into %s", steps, out)
    traced = []
    start_lean_trace(out)
    try:
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                t0 = time.perf_counter()
                args = one_step(args)
                traced.append(time.perf_counter() - t0)
    finally:
        t0 = time.perf_counter()
        jax.profiler.stop_trace()
        stop_s = time.perf_counter() - t0
    step_times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        args = one_step(args)
        step_times.append(time.perf_counter() - t0)

    meta = environment()
    meta.update(program=_module_name(hlo_text), warmup=warmup, steps=steps,
                step_times_s=step_times, traced_step_times_s=traced, trace_stop_s=stop_s,
                time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if mesh is not None:
        meta["mesh"] = {str(k): int(v) for k, v in dict(mesh.shape).items()}
    cost = _cost_dict(compiled)
    (out / HLO_FILE).write_text(hlo_text)
    (out / CAPTURE_FILE).write_text(json.dumps({"meta": meta, "cost_analysis": cost}, indent=2))
    return Capture(trace_dir=out, hlo_text=hlo_text, cost_analysis=cost, meta=meta)
