"""JAX's persistent compilation cache: harness runs fill it in the harness's cache directory."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = """
import jax, jax.numpy as jnp
from harness.runs import compile_cache
print(compile_cache.enable())
jax.jit(lambda x: jnp.tanh(x) * 2).lower(jnp.ones(8)).compile()
"""


def test_enable_caches_even_a_small_program_under_the_harness_cache(tmp_path):
    env = dict(os.environ, SCALING_HARNESS_CACHE=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "xla")
    # a program that compiles in milliseconds is still written (min compile time 0)
    assert [p for p in (tmp_path / "xla").iterdir() if p.name.startswith("jit_")]
