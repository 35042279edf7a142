"""Ahead-of-time compilation of configs too big for the host, on virtual CPU devices.

jax 0.10 can *lower* a workload built on an ``AbstractMesh`` (``workloads.mesh.lower_abstract``)
but compiling — which is what yields the post-SPMD HLO with its collectives — needs that many
concrete devices, and XLA's CPU device count is fixed when jax is first imported. So
``compile_in_subprocess`` starts ``python -m workloads.aot`` with
``--xla_force_host_platform_device_count=<prod(mesh)>``; the child builds the workload with
``abstract=True`` (``jax.ShapeDtypeStruct`` arguments: nothing is allocated), lowers, compiles and
writes the compiled HLO text, ``cost_analysis()``, ``memory_analysis()`` and timings into a
directory.

With ``tpu_chip="tpu-v5p"`` (and libtpu installed) the child compiles for that TPU slice instead
(``workloads.tpu``: ``8x8`` -> ``v5p:4x4x4``) with the TPU compiler, libtpu's noise silenced:
the HLO is what a TPU would run (tiled layouts, async collectives, TPU fusions).
``start_compile`` returns a running job, so a TPU and a CPU compile can run side by side.

    result = compile_in_subprocess("llama_train", "70b", {"parallelism": "fsdp_tp"}, "8x8")
    result.hlo_text, result.lower_s, result.compile_s, result.memory
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from workloads import aot_cache, tpu
from workloads.aot_cache import CPU_COMPILER, AotResult
from workloads.base import WorkloadError

log = logging.getLogger(__name__)
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


OOM_EXIT = 3  # the child's exit code when the TPU compiler ran out of HBM (message in oom.txt)


class HbmExhausted(WorkloadError):
    """The TPU compiler refused the program: it does not fit the chip's HBM (the message says
    by how much)."""
# CompiledMemoryStats fields -> the keys of AotResult.memory (bytes per device)
MEMORY_FIELDS = {"argument_size_in_bytes": "arguments", "output_size_in_bytes": "outputs",
                 "alias_size_in_bytes": "aliased", "temp_size_in_bytes": "temporaries",
                 "generated_code_size_in_bytes": "code", "peak_memory_in_bytes": "peak",
                 "host_temp_size_in_bytes": "host_temporaries"}


def compile_here(name: str, preset: str, overrides: Mapping[str, str] | None, mesh_shape: str,
                 tpu_chip: str | None = None):
    """Build with abstract args on the live devices (or on ``tpu_chip``'s slice), lower and
    compile. Returns ``(compiled, lower_s, compile_s)``.
    """
    import workloads
    from workloads.mesh import workload_mesh

    workload = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides)
    if tpu_chip:
        mesh, _ = tpu.topology_mesh(tpu_chip, mesh_shape, workload.mesh_axes)
    else:
        mesh = workload_mesh(workload.mesh_axes, mesh_shape)
    fn, args = workload.build(cfg, mesh, abstract=True)
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


def _child_env(devices: int, tpu_chip: str | None) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + ([] if tpu_chip else [f"{DEVICE_COUNT_FLAG}={devices}"]))
    env["JAX_PLATFORMS"] = "cpu"  # the TPU slice comes from libtpu's topology, not a backend
    if tpu_chip:
        env.update(tpu.QUIET_ENV)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


# a traceback's exception line: "jax.errors.JaxRuntimeError: INVALID_ARGUMENT: ..."
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exhausted|Exit)\b(: |$)")


def failure_line(output: str) -> str:
    """The line of a failed child's output that names its error: the last exception line of
    its traceback (the lines after it are the message's continuation, jax's "Suspected Python
    Code Location" or its note on filtered frames), else its last line."""
    lines = [x.strip() for x in output.strip().splitlines() if x.strip()]
    named = [x for x in lines if ERROR_LINE.match(x)]
    return (named or lines or ["no output"])[-1]


class CompileJob:
    """A compile running in a child process; ``result()`` waits for it (WorkloadError with the
    line of the child's output that names its error on failure, ``failure_line``)."""

    def __init__(self, name: str, preset: str, overrides: Mapping[str, str] | None,
                 mesh_shape: str, tpu_chip: str | None, timeout_s: float):
        from workloads.mesh import mesh_dims

        dims = mesh_dims(mesh_shape)
        self.devices, self.tpu_chip, self.timeout_s = math.prod(dims), tpu_chip, timeout_s
        self.what = f"{name}/{preset} on {mesh_shape}"
        if tpu_chip:
            if not tpu.libtpu_available():
                raise WorkloadError(f"compiling for {tpu_chip} needs libtpu: {tpu.INSTALL_HINT}")
            self.topology = tpu.topology_name(tpu_chip, dims)
            self.compiler = f"XLA:TPU (libtpu {tpu.libtpu_version()})"
        else:
            self.topology, self.compiler = None, CPU_COMPILER
        self._dir = tempfile.TemporaryDirectory(prefix="workloads-aot-")
        cmd = [sys.executable, "-m", "workloads.aot", name, "--preset", preset,
               "--mesh", mesh_shape, "--out", self._dir.name]
        cmd += ["--tpu-chip", tpu_chip] if tpu_chip else []
        for key, value in (overrides or {}).items():
            cmd += ["--set", f"{key}={value}"]
        log.info("compiling %s with %s%s", self.what, self.compiler,
                 f" for {self.topology}" if self.topology else f" on {self.devices} CPU devices")
        # output to a file, not a pipe: a job waited on later must not block on a full pipe
        self._log = open(Path(self._dir.name, "child.log"), "w+")  # noqa: SIM115 - closed in result()
        self._proc = subprocess.Popen(cmd, env=_child_env(self.devices, tpu_chip), text=True,
                                      stdout=self._log, stderr=subprocess.STDOUT)

    def result(self) -> AotResult:
        try:
            self._proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            self._log.close()
            self._dir.cleanup()
            raise WorkloadError(f"AOT compile of {self.what} took over {self.timeout_s:.0f} s; "
                                "stopped") from None
        try:
            self._log.seek(0)
            output = self._log.read()
            self._log.close()
            oom = Path(self._dir.name, "oom.txt")
            if self._proc.returncode == OOM_EXIT and oom.exists():
                raise HbmExhausted(f"{self.compiler} for {self.topology}: {oom.read_text()}")
            if self._proc.returncode != 0:
                where = f" for {self.topology}" if self.topology else ""
                raise WorkloadError(f"AOT compile of {self.what}{where} failed: "
                                    f"{failure_line(output)}")
            out = Path(self._dir.name)
            timings = json.loads((out / "timings.json").read_text())
            return AotResult((out / "compiled.hlo.txt").read_text(), timings["lower_s"],
                             timings["compile_s"], self.devices, timings.get("cost_analysis", {}),
                             self.compiler, self.topology, timings.get("memory", {}))
        finally:
            self._dir.cleanup()


class _Cached:
    """A finished job: a result read from the cache, or one to store there once compiled."""

    def __init__(self, job: CompileJob | None, result: AotResult | None, store):
        self._job, self._result, self._store = job, result, store

    def result(self) -> AotResult:
        if self._result is None:
            self._result = self._job.result()
            self._store(self._result)
        return self._result


def start_compile(name: str, preset: str = "tiny", overrides: Mapping[str, str] | None = None,
                  mesh_shape: str = "8x8", tpu_chip: str | None = None,
                  timeout_s: float = 3600.0, cache_dir: str | Path | None = None):
    """Start compiling ``name`` in a fresh Python process: on ``prod(mesh_shape)`` virtual CPU
    devices, or for ``tpu_chip``'s TPU slice (needs libtpu). With ``cache_dir``, a compile made
    before with the same inputs and versions is read back (``workloads.aot_cache``) and a new
    one is stored. The returned job's ``result()`` waits for the ``AotResult``."""
    if cache_dir is None:
        return CompileJob(name, preset, overrides, mesh_shape, tpu_chip, timeout_s)
    digest = aot_cache.key(name, preset, overrides, mesh_shape, tpu_chip)
    hit = aot_cache.load(Path(cache_dir), digest)
    if hit is not None:
        log.info("AOT compile of %s/%s on %s read from the cache", name, preset, mesh_shape)
        return _Cached(None, hit, None)
    job = CompileJob(name, preset, overrides, mesh_shape, tpu_chip, timeout_s)
    return _Cached(job, None, lambda r: aot_cache.save(Path(cache_dir), digest, r))


def compile_in_subprocess(name: str, preset: str = "tiny",
                          overrides: Mapping[str, str] | None = None, mesh_shape: str = "8x8",
                          timeout_s: float = 3600.0, tpu_chip: str | None = None) -> AotResult:
    """Compile ``name`` in a child process and wait for it (see ``start_compile``)."""
    return start_compile(name, preset, overrides, mesh_shape, tpu_chip, timeout_s).result()


def memory_stats(compiled) -> dict:
    """``compiled.memory_analysis()`` as ``MEMORY_FIELDS`` -> bytes per device ({} if none)."""
    try:
        stats = compiled.memory_analysis()
    except Exception as e:  # noqa: BLE001 - some backends do not implement it
        log.info("memory_analysis() unavailable: %s", e)
        return {}
    if isinstance(stats, (list, tuple)):
        stats = stats[0] if stats else None
    return {key: int(getattr(stats, f)) for f, key in MEMORY_FIELDS.items()
            if stats is not None and getattr(stats, f, None) is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.aot",
                                     description="compile a workload from abstract arguments")
    parser.add_argument("workload")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", required=True, help="directory for compiled.hlo.txt, timings.json")
    parser.add_argument("--tpu-chip", default=None, help="compile for this chip's TPU slice")
    args = parser.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        compiled, lower_s, compile_s = compile_here(args.workload, args.preset, overrides,
                                                    args.mesh, args.tpu_chip)
    except Exception as e:  # jax's runtime error type moved between versions
        first = (str(e).strip().splitlines() or [""])[0]
        if not (args.tpu_chip and tpu.OOM_MARK in first):
            raise
        (out / "oom.txt").write_text(first.split(": ", 1)[-1].rstrip("."))
        return OOM_EXIT
    (out / "compiled.hlo.txt").write_text(compiled.as_text())
    cost = compiled.cost_analysis() or {}  # one dict (jax >= 0.10)
    (out / "timings.json").write_text(json.dumps({
        "lower_s": lower_s, "compile_s": compile_s, "memory": memory_stats(compiled),
        "cost_analysis": {k: float(v) for k, v in cost.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
