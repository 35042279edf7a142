"""XLA's own account of a compiled program's memory, from a child process that compiles it with
the dump flag (``--xla_dump_to``): the text the CPU, GPU and TPU compilers all write.

XLA reads ``XLA_FLAGS`` once per process, so the compile runs in a fresh one
(``python -m workloads.aot``, the harness's ahead-of-time compiler, on virtual CPU devices or for
a TPU slice through libtpu). Of the files it leaves, four are read (``Dump``):
``*after_optimizations.txt`` (the scheduled HLO, with each instruction's metadata),
``*after_optimizations-buffer-assignment.txt`` (every allocation and the values it holds),
``*after_optimizations-live-range.txt`` (the flattened schedule, each buffer's live range and the
buffers live at the peak) and the child's ``timings.json`` (``memory_analysis()``). libtpu leaves
the executable's serialized buffer assignment empty, and the serialized one of the CPU and GPU
compilers holds no live ranges: the dump is the one source that gives both on every backend.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError

log = logging.getLogger(__name__)

DUMP_FLAGS = ("--xla_dump_hlo_as_text",)
ASSIGNMENT_SUFFIX = "after_optimizations-buffer-assignment.txt"
LIVE_RANGE_SUFFIX = "after_optimizations-live-range.txt"
HLO_SUFFIX = "after_optimizations.txt"
TIMEOUT_S = 1800.0


@dataclass
class Dump:
    """The texts of one compiled program's dump (empty where the compiler wrote none) and its
    ``memory_analysis()`` (``workloads.aot.MEMORY_FIELDS`` keys, bytes per device).
    ``compiler``: which compiled it; ``refused``: the compiler's out-of-memory message where
    it refused the program (then there is no assignment)."""

    program: str = ""
    hlo: str = ""
    assignment: str = ""
    live_range: str = ""
    memory: dict = field(default_factory=dict)
    compiler: str = ""
    refused: str = ""


def read_dump(folder: Path) -> Dump:
    """The largest program's texts in an XLA dump ``folder`` (the step, beside any helper
    programs jax compiled); an empty ``Dump`` where it holds none."""
    found = sorted(Path(folder).glob(f"*{ASSIGNMENT_SUFFIX}"), key=lambda p: p.stat().st_size)
    if not found:
        return Dump()
    path = found[-1]
    stem = path.name[: -len(ASSIGNMENT_SUFFIX)]
    text = lambda suffix: _read(path.with_name(stem + suffix))  # noqa: E731
    parts = stem.split(".")
    program = parts[1] if len(parts) > 1 else stem
    return Dump(program=program, hlo=text(HLO_SUFFIX), assignment=text(ASSIGNMENT_SUFFIX),
                live_range=text(LIVE_RANGE_SUFFIX))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _command(name: str, preset: str, overrides: Mapping[str, str] | None, mesh: str,
             out: Path, tpu_chip: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "workloads.aot", name, "--preset", preset, "--mesh", mesh,
           "--out", str(out)]
    cmd += ["--tpu-chip", tpu_chip] if tpu_chip else []
    for key, value in (overrides or {}).items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


@contextlib.contextmanager
def _no_persistent_cache():
    """jax's persistent compilation cache off for one compile: on (``harness run`` turns it
    on), it hands back an executable compiled before, with no compile to dump (its key leaves
    the dump options out). jax decides once per process whether it uses the cache, so the
    decision is reset on the way in and out."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


def dump_here(lowered, platform: str = "") -> Dump:
    """Compile ``lowered`` (a ``jax.stages.Lowered``: a user's own function) once more in this
    process with XLA's dump on, for this compile alone (``compiler_options``: XLA reads them
    per compile, where ``XLA_FLAGS`` it reads once per process), and read what it wrote."""
    from workloads.aot import memory_stats

    with tempfile.TemporaryDirectory(prefix="harness-memory-") as tmp:
        options = {"xla_dump_to": tmp, **{flag.lstrip("-"): True for flag in DUMP_FLAGS}}
        with _no_persistent_cache():
            compiled = lowered.compile(compiler_options=options)
        result = read_dump(Path(tmp))
    result.memory = memory_stats(compiled)
    result.compiler = f"XLA:{platform.upper()}" if platform else "XLA"
    return result


def compile_dump(name: str, preset: str = "tiny", overrides: Mapping[str, str] | None = None,
                 mesh: str = "1", tpu_chip: str | None = None,
                 timeout_s: float = TIMEOUT_S) -> Dump:
    """Compile workload ``name`` in a child process with XLA's dump on (on ``prod(mesh)``
    virtual CPU devices, or for ``tpu_chip``'s slice) and read what it wrote. A TPU compiler
    that refuses the program for want of HBM gives a ``Dump`` with ``refused`` set."""
    from workloads import aot, tpu
    from workloads.aot_cache import CPU_COMPILER
    from workloads.mesh import mesh_dims

    devices = math.prod(mesh_dims(mesh))
    if tpu_chip and not tpu.libtpu_available():
        raise HarnessError(f"memory for {tpu_chip} needs libtpu: {tpu.INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="harness-memory-") as tmp:
        out, dump = Path(tmp, "out"), Path(tmp, "dump")
        env = aot._child_env(devices, tpu_chip)
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), f"--xla_dump_to={dump}",
                                     *DUMP_FLAGS]).strip()
        log.info("compiling %s (%s) on %s with XLA's dump", name, preset, tpu_chip or mesh)
        try:
            done = subprocess.run(_command(name, preset, overrides, mesh, out, tpu_chip),
                                  env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"compiling {name} ({preset}) took over {timeout_s:.0f} s; "
                               "stopped") from None
        compiler = f"XLA:TPU (libtpu {tpu.libtpu_version()})" if tpu_chip else CPU_COMPILER
        if done.returncode == aot.OOM_EXIT and (out / "oom.txt").exists():
            return Dump(compiler=compiler, refused=(out / "oom.txt").read_text())
        if done.returncode != 0:
            last = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
            raise HarnessError(f"compiling {name} ({preset}) failed: {last[-1][:300]}")
        result = read_dump(dump)
        result.compiler = compiler
        try:
            result.memory = json.loads((out / "timings.json").read_text()).get("memory", {})
        except (OSError, ValueError):
            result.memory = {}
        return result
