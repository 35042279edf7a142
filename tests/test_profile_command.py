"""Your own program from the command line: ``harness profile SCRIPT`` and ``harness trace`` on a
plain ``jax.profiler`` trace of a function of your own (real subprocesses, 8 CPU devices)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import schema
from harness.record import Run

HARNESS = [sys.executable, "-m", "harness"]
SCRIPT = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    n = int(sys.argv[1])
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    g = jax.jit(lambda x: (x * 2).mean())
    x = jax.device_put(np.ones((n, n), np.float32))  # a copy, no program: f and g alone run
    for _ in range(3):
        f(x).block_until_ready()
    g(x).block_until_ready()
    if len(sys.argv) > 2:
        raise ValueError(sys.argv[2])
""")


def _env(tmp_path: Path) -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path))


def _harness(tmp_path, *argv, timeout=240):
    return subprocess.run([*HARNESS, *argv], capture_output=True, text=True, timeout=timeout,
                          env=_env(tmp_path), cwd=tmp_path, check=False)


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_profile_reports_the_step_program_lists_every_program_and_stores_it(tmp_path):
    (tmp_path / "mine.py").write_text(SCRIPT)
    done = _harness(tmp_path, "profile", "--format", "json", "--out", "runs", "mine.py", "128")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[:done.stdout.rindex("}") + 1])
    programs = {(p[schema.PROGRAM], p[schema.EXECUTIONS]) for p in report["programs"]}
    # f ran 3 times and g once: two compilations of a lambda, each its own program id
    assert sorted(n for _, n in programs) == [1, 3]
    assert len({p[schema.PROGRAM_ID] for p in report["programs"]}) == 2
    # the ops are the step program's: f, the one that ran 3 times
    (step,) = [p[schema.PROGRAM_ID] for p in report["programs"] if p[schema.EXECUTIONS] == 3]
    assert {o[schema.PROGRAM_ID] for o in report["ops"]} == {step}
    assert report["meta"][schema.PROGRAM_ID] == step
    (stored,) = list((tmp_path / "runs").iterdir())
    run = Run.load(stored)
    assert len(run.programs) == 2 and (stored / "trace").is_dir()
    # --program all: every program's ops, each row naming its compilation
    done = _harness(tmp_path, "trace", str(stored / "trace"), "--program", "all", "--format",
                    "json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert {o[schema.PROGRAM_ID] for o in json.loads(done.stdout)["ops"]} == {
        p[schema.PROGRAM_ID] for p in report["programs"]}


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_script_that_fails_still_reports_what_it_ran_and_exits_1(tmp_path):
    (tmp_path / "mine.py").write_text(SCRIPT)
    done = _harness(tmp_path, "profile", "mine.py", "64", "boom")
    assert done.returncode == 1
    assert "raised ValueError: boom" in done.stderr
    assert "programs ran" in done.stdout  # the report of both programs, printed anyway


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_plain_jax_profiler_trace_of_your_function_gives_its_full_table(tmp_path):
    """RNG programs run before the profile starts; the trace holds only the user's program,
    which is the one reported (predicted for this host's cpu chip), not an empty table."""
    code = textwrap.dedent(f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        import jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((8,), ("X",))
        x = jax.device_put(jax.random.normal(jax.random.key(0), (512, 256)),
                           NamedSharding(mesh, P("X")))
        w = jax.random.normal(jax.random.key(1), (256, 256))
        f = jax.jit(lambda x, w: jnp.tanh(x @ w).sum())
        f(x, w).block_until_ready()
        with jax.profiler.trace({str(tmp_path / 'prof')!r}):
            for _ in range(3):
                f(x, w).block_until_ready()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(tmp_path), timeout=240)
    done = _harness(tmp_path, "trace", "prof", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    ops = report["ops"]
    assert {o[schema.PROGRAM] for o in ops} == {"jit__lambda"}
    assert all(o[schema.BOUND] != schema.UNMODELED for o in ops)
    assert {o[schema.CATEGORY] for o in ops} >= {"matmul", "collective"}
    assert report["meta"][schema.CHIP] == "cpu"
    assert report["title"].startswith("jit__lambda on 8x cpu ")  # the trace's devices
