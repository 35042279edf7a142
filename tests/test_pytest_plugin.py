"""The pytest plugin on the one path: ``harness_run`` profiles a registered workload or the
user's own step (donated inputs and keyword arguments included), fills pytest-benchmark's
``extra_info``, and stores runs that ``harness compare`` reads."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness import schema
from harness.chip import drift
from harness.record import list_runs

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


@pytest.fixture
def this_checkout(monkeypatch):
    """pytest sessions in a subprocess import this checkout's harness, not an installed one."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_harness_run_profiles_steps_and_saves_runs_for_compare(pytester, tmp_path,
                                                               this_checkout):
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
    for r in runs:  # each step's CPU time beside its wall time, the host probe around them
        assert len(r.meta[schema.STEP_CPU_TIMES_S]) == len(r.meta[schema.STEP_TIMES_S]) == 2
        assert [len(x) for x in r.meta[drift.HOST_DRIFT][drift.CPU_RATES]] == [drift.REPEATS] * 2


def test_extra_info_is_json_plain():
    import json

    import pandas as pd

    from harness import schema
    from harness.pytest_plugin import extra_info
    from harness.record import Run

    ops = pd.DataFrame({schema.OP: ["dot.1"], schema.CATEGORY: ["matmul"],
                        schema.MEASURED_S: [2e-3], schema.PREDICTED_S: [1e-3],
                        schema.EFFICIENCY: [0.5], schema.BOUND: ["compute"]})
    info = extra_info(Run(meta={schema.CHIP: "h100"}, ops=ops,
                          summary={schema.STEP_S: 3e-3, schema.MFU: float("nan")}))
    assert info["harness_step_s"] == 3e-3 and info["harness_efficiency"] == 0.5
    assert "harness_mfu" in info and info["harness_mfu"] is None  # NaN becomes null
    json.dumps(info)


USER_MODEL = Path(__file__).parent / "fixtures" / "regress" / "user_model.py"


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_users_own_benchmark_as_a_nightly_job(pytester, tmp_path, monkeypatch, capsys,
                                                this_checkout):
    """The nightly flow end to end on a benchmark the harness does not contain: a baseline saved
    with --harness-save; the same code again with a CPU load beside it (no regression, in pytest
    and in `harness compare`); the layout that gives every device the whole batch (the test
    fails, and the verdict says the program does more work)."""
    import json
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    from harness.cli import main

    pytester.makepyfile(test_user_model=USER_MODEL.read_text())
    for name, value in (("B", "1024"), ("D", "128"), ("F", "512"), ("STEPS", "5")):
        monkeypatch.setenv(f"USER_MODEL_{name}", value)
    base, same, whole = (tmp_path / n for n in ("base", "same", "whole"))

    def session(save, *more):
        return pytester.runpytest_subprocess("--harness-devices", "8", "--harness-save",
                                             str(save), "-q", "-p", "no:cacheprovider", *more,
                                             timeout=300)

    session(base).assert_outcomes(passed=1)
    load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        session(same, "--harness-compare", str(base)).assert_outcomes(passed=1)
    finally:
        load.kill()
        load.wait()
    monkeypatch.setenv("WHOLE_BATCH", "1")
    failed = session(whole, "--harness-compare", str(base))
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*harness: regression (program): the program does more work: "
                                 "8x the FLOPs*"])

    junit = tmp_path / "junit.xml"
    assert main(["compare", str(base), str(same), "--junit", str(junit)]) == 0
    assert "REGRESSION" not in capsys.readouterr().out
    assert ET.parse(junit).getroot().get("failures") == "0"
    verdict = tmp_path / "verdict.json"
    assert main(["compare", str(base), str(whole), "--junit", str(junit), "--json",
                 str(verdict)]) == 1
    (pair,) = json.loads(verdict.read_text())["pairs"]
    assert (pair["verdict"], pair["cause"]) == ("regression", "program")
    assert pair["program"]["flops_x"] == pytest.approx(8.0, rel=0.01)  # every device, all 8
    assert ET.parse(junit).getroot().get("failures") == "1"


@pytest.mark.libtpu
def test_the_plugin_keeps_an_installed_libtpu_quiet(pytester, monkeypatch, this_checkout):
    from harness.devices import NO_TPU_ENV, PLATFORMS_ENV

    for name in (*NO_TPU_ENV, PLATFORMS_ENV):  # as a fresh shell has them: unset
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_q="""
        def test_q():
            import jax.numpy as jnp
            assert float(jnp.ones(3).sum()) == 3.0
    """)
    quiet = pytester.runpytest_subprocess("-q", "-s", "-p", "no:cacheprovider", timeout=120)
    quiet.assert_outcomes(passed=1)
    loud = pytester.runpytest_subprocess("-q", "-s", "-p", "no:cacheprovider",
                                         "-p", "no:harness.pytest_plugin", timeout=120)
    loud.assert_outcomes(passed=1)
    if "TPU" not in "\n".join(loud.outlines + loud.errlines):  # libtpu's start-up errors
        # libtpu has printed nothing at start-up in a full-suite run on a host where other
        # processes were compiling with it at the time: then there is nothing to quiet
        pytest.skip("libtpu printed no start-up errors without the plugin on this host now")
    assert "TPU" not in "\n".join(quiet.outlines + quiet.errlines)
