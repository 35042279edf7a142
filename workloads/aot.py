"""Ahead-of-time compilation of configs too big for the host, on virtual CPU devices.

jax 0.10 can *lower* a workload built on an ``AbstractMesh`` (``workloads.mesh.lower_abstract``)
but compiling — which is what yields the post-SPMD HLO with its collectives — needs that many
concrete devices, and XLA's CPU device count is fixed when jax is first imported. So
``compile_in_subprocess`` starts ``python -m workloads.aot`` with
``--xla_force_host_platform_device_count=<prod(mesh)>``; the child builds the workload with
``abstract=True`` (``jax.ShapeDtypeStruct`` arguments: nothing is allocated), lowers, compiles and
writes the compiled HLO text, ``cost_analysis()`` and timings into a directory.

    result = compile_in_subprocess("llama_train", "70b", {"parallelism": "fsdp_tp"}, "8x8")
    result.hlo_text, result.lower_s, result.compile_s
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from workloads.base import WorkloadError

log = logging.getLogger(__name__)
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


@dataclass(frozen=True)
class AotResult:
    hlo_text: str
    lower_s: float
    compile_s: float
    devices: int
    cost_analysis: dict


def compile_here(name: str, preset: str, overrides: Mapping[str, str] | None, mesh_shape: str):
    """Build with abstract args on the live devices, lower and compile.

    Returns ``(compiled, lower_s, compile_s)``.
    """
    import workloads
    from workloads.mesh import workload_mesh

    workload = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides)
    mesh = workload_mesh(workload.mesh_axes, mesh_shape)
    fn, args = workload.build(cfg, mesh, abstract=True)
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


def compile_in_subprocess(name: str, preset: str = "tiny",
                          overrides: Mapping[str, str] | None = None, mesh_shape: str = "8x8",
                          timeout_s: float = 3600.0) -> AotResult:
    """Compile ``name`` on ``prod(mesh_shape)`` virtual CPU devices in a fresh Python process."""
    from workloads.mesh import parse_shape

    devices = math.prod(parse_shape(mesh_shape))
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + [f"{DEVICE_COUNT_FLAG}={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory(prefix="workloads-aot-") as out:
        cmd = [sys.executable, "-m", "workloads.aot", name, "--preset", preset,
               "--mesh", mesh_shape, "--out", out]
        for key, value in (overrides or {}).items():
            cmd += ["--set", f"{key}={value}"]
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        log.info("compiling %s/%s on %d virtual devices", name, preset, devices)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise WorkloadError(f"AOT compile of {name}/{preset} on {mesh_shape} failed: {last}")
        timings = json.loads(Path(out, "timings.json").read_text())
        return AotResult(Path(out, "compiled.hlo.txt").read_text(), timings["lower_s"],
                         timings["compile_s"], devices, timings.get("cost_analysis", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.aot",
                                     description="compile a workload from abstract arguments")
    parser.add_argument("workload")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", required=True, help="directory for compiled.hlo.txt, timings.json")
    args = parser.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    compiled, lower_s, compile_s = compile_here(args.workload, args.preset, overrides, args.mesh)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compiled.hlo.txt").write_text(compiled.as_text())
    cost = compiled.cost_analysis() or {}  # one dict (jax >= 0.10)
    (out / "timings.json").write_text(json.dumps({
        "lower_s": lower_s, "compile_s": compile_s,
        "cost_analysis": {k: float(v) for k, v in cost.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
