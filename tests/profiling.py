"""Running ``harness profile`` in a subprocess from a test: its environment (jax on CPU, the temp
folder the test's own, no device count of the test session's) and its JSON report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness import schema

HARNESS = [sys.executable, "-m", "harness"]


def env_for(tmp_path: Path, **extra) -> dict:
    """This environment without the test session's device count, jax on CPU, TMPDIR the test's."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    return dict(env, JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path), **extra)


def harness(tmp_path, *argv, env=None, timeout=240) -> subprocess.CompletedProcess:
    """``harness ARGV`` run in ``tmp_path``, its output captured."""
    return subprocess.run([*HARNESS, *argv], capture_output=True, text=True, timeout=timeout,
                          env=env or env_for(tmp_path), cwd=tmp_path, check=False)


def report_of(stdout: str) -> dict:
    """The JSON report at the end of ``harness profile --format json``'s output."""
    return json.loads(stdout[stdout.index("\n{") + 1 if not stdout.startswith("{") else 0:
                             stdout.rindex("}") + 1])


def executions(report: dict) -> dict[str, int]:
    """Each program's executions, by name, from a JSON report."""
    return {p[schema.PROGRAM]: p[schema.EXECUTIONS] for p in report["programs"]}
