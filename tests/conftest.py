"""Test session set-up, before anything imports jax: 8 virtual CPU devices, and a private
calibration and compilation cache so tests never read or write the user's
~/.cache/scaling-harness; the private cache is removed when the session ends."""
import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from harness.devices import quiet_absent_tpu, set_host_device_count

set_host_device_count(8, keep_existing=True)
quiet_absent_tpu()  # as the harness command does: on this host, jax on the CPU alone
_CACHE = tempfile.mkdtemp(prefix="scaling-harness-test-cache-")
os.environ["SCALING_HARNESS_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# pytester restores sys.modules after each test that uses it, but pandas registers its pyarrow
# extension types once per process, on first use: imported here, before any snapshot, so that a
# parquet read after such a test does not register them again (ArrowKeyError "pandas.period
# already defined").
try:
    import pandas.core.arrays.arrow.extension_types  # noqa: F401
except ImportError:  # a pandas that keeps them elsewhere
    pass

# Captured HLO texts and their cost_analysis() (tests/fixtures/hlo/programs.py writes them).
FIXTURES = Path(__file__).parent / "fixtures" / "hlo"


def pytest_collection_modifyitems(config, items):
    """Skip ``@pytest.mark.libtpu`` tests, saying why, where libtpu is not installed."""
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        return
    skip = pytest.mark.skip(reason="needs libtpu to compile for TPU slices: "
                                   "pip install 'scaling-harness[tpu]'")
    for item in items:
        if "libtpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cpu_traces(tmp_path_factory) -> list[Path]:
    """Two traces of a jitted program over 8 CPU devices (a matmul and an all-reduce), made
    with plain ``jax.profiler``: one with step annotations, one without."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(jax.devices(), ("x",))
    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("x", None)))
    w = jnp.ones((32, 32)) * 0.01

    @jax.jit
    def f(x, w):
        for _ in range(3):
            x = jnp.tanh(x @ w)
            x = x - jnp.sum(x, axis=0, keepdims=True) * 1e-3
        return x

    f(x, w).block_until_ready()
    out = []
    for annotated in (True, False):
        where = tmp_path_factory.mktemp("annotated" if annotated else "plain")
        with jax.profiler.trace(str(where)):
            for step in range(3):
                if annotated:
                    with jax.profiler.StepTraceAnnotation("step", step_num=step):
                        f(x, w).block_until_ready()
                else:
                    f(x, w).block_until_ready()
        out.append(where)
    return out
