"""The pytest plugin on the one path: ``harness_run`` profiles a registered workload or the
user's own step (donated inputs and keyword arguments included), fills pytest-benchmark's
``extra_info``, and stores runs that ``harness compare`` reads."""
from __future__ import annotations

from harness.runs.run import list_runs

pytest_plugins = ["pytester"]

INNER = '''
import functools

import jax
import jax.numpy as jnp

from harness import schema


@functools.partial(jax.jit, donate_argnums=0)
def train_step(w_DF, x_BD, *, lr):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x_BD @ w) ** 2))(w_DF)
    return w_DF - lr * g, loss


def test_own_step(benchmark, harness_run):
    w, x = jnp.ones((256, 128)) * 0.01, jnp.ones((64, 256))
    run = harness_run(train_step, w, x, lr=0.1, steps=2, warmup=1, rounds=3)
    assert not w.is_deleted()
    assert benchmark.extra_info["harness_step_s"] == run.summary[schema.STEP_S] > 0
    assert len(benchmark.stats.stats.data) == 3  # timed by pytest-benchmark, copies per round


def test_workload(harness_run):
    run = harness_run("matmul", overrides={"case": "allreduce"}, mesh="4x2", steps=2, warmup=1)
    assert run.meta["workload"] == "matmul" and run.meta["test"].endswith("test_workload")
    assert any(op.startswith("all-reduce") for op in run.ops[schema.OP])
'''


def test_harness_run_profiles_steps_and_saves_runs_for_compare(pytester, tmp_path):
    pytester.makepyfile(test_inner=INNER)
    saved = tmp_path / "nightly"
    # a fresh process, as a CI job runs it (in-process, pandas would be imported twice)
    result = pytester.runpytest_subprocess("--harness-devices", "8", "--harness-save",
                                           str(saved), "-q", "-p", "no:cacheprovider",
                                           timeout=300)
    result.assert_outcomes(passed=2)
    runs = list_runs(saved)
    assert sorted(r.meta.get("workload", "fn") for r in runs) == ["fn", "matmul"]
    assert all((r.path / "trace").is_dir() and len(r.ops) for r in runs)


def test_extra_info_is_json_plain():
    import json

    import pandas as pd

    from harness import schema
    from harness.pytest_plugin import extra_info
    from harness.runs.run import Run

    ops = pd.DataFrame({schema.OP: ["dot.1"], schema.CATEGORY: ["matmul"],
                        schema.MEASURED_S: [2e-3], schema.PREDICTED_S: [1e-3],
                        schema.EFFICIENCY: [0.5], schema.BOUND: ["compute"]})
    info = extra_info(Run(meta={schema.CHIP: "h100"}, ops=ops,
                          summary={schema.STEP_S: 3e-3, schema.MFU: float("nan")}))
    assert info["harness_step_s"] == 3e-3 and info["harness_efficiency"] == 0.5
    assert "harness_mfu" in info and info["harness_mfu"] is None  # NaN becomes null
    json.dumps(info)
