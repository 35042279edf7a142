"""Run a jitted function under the XLA profiler: warm up, then trace N measured steps.

Each measured step runs inside ``jax.profiler.StepTraceAnnotation`` and is waited on before the
next starts, so steps never overlap. The compiled HLO text and ``cost_analysis()`` are saved next
to the trace (``module.hlo.txt``, ``capture.json``) so that later stages can cost the same program
that ran.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata as _md
from pathlib import Path

from harness import schema
from harness.errors import HarnessError

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

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
        return self.meta.get(schema.PROGRAM, "")


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
        schema.DEVICE_KIND: devices[0].device_kind if devices else "",
        "platform": devices[0].platform if devices else "",
        schema.DEVICE_COUNT: len(devices),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "jax_version": jax.__version__,
        "jaxlib_version": _version("jaxlib"),
        "xprof_version": _version("xprof"),
        "host": platform.node(),
        "python": platform.python_version(),
    }


def cost_dict(cost_analysis) -> dict | None:
    """What ``compiled.cost_analysis()`` returned, as one dict: jax >= 0.10 returns a dict,
    older jax a list of one dict per program (the first is taken). None for anything else."""
    if isinstance(cost_analysis, (list, tuple)):
        cost_analysis = cost_analysis[0] if cost_analysis else {}
    return cost_analysis if isinstance(cost_analysis, Mapping) else None


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
    jax.profiler.start_trace(str(out))
    try:
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                args = one_step(args)
    finally:
        jax.profiler.stop_trace()

    meta = environment()
    meta.update({schema.PROGRAM: _module_name(hlo_text), schema.WARMUP: warmup,
                 schema.STEPS: steps,
                 schema.TIME: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    if mesh is not None:
        meta[schema.MESH] = {str(k): int(v) for k, v in dict(mesh.shape).items()}
    cost = _cost_dict(compiled)
    (out / HLO_FILE).write_text(hlo_text)
    (out / CAPTURE_FILE).write_text(json.dumps({"meta": meta, "cost_analysis": cost}, indent=2))
    return Capture(trace_dir=out, hlo_text=hlo_text, cost_analysis=cost, meta=meta)
