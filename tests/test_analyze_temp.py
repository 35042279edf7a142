"""``harness.analyze`` without ``out_dir`` leaves nothing in the temporary directory: the trace
lives in a folder of the Run's own, which ``run.save`` stores while the Run lives and which goes
when the Run is garbage-collected; an analysis that fails removes it at once."""
import gc
import tempfile

import jax
import jax.numpy as jnp
import pytest

import harness
from harness.errors import UserError

STEPS, WARMUP = 2, 1


@jax.jit
def step(x):
    return jnp.tanh(x @ x.T).sum()


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A temporary directory of the test's own, as ``tempfile`` gives it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _traces(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("harness-"))


def test_a_dropped_run_leaves_no_trace_folder(scratch):
    run = harness.analyze(step, jnp.ones((64, 64)), steps=STEPS, warmup=WARMUP, chip="h100")
    assert len(_traces(scratch)) == 1  # the run's trace, while the run lives
    assert run.summary
    del run
    gc.collect()
    assert _traces(scratch) == []


def test_save_stores_the_trace_of_a_live_run_and_leaves_nothing(scratch, tmp_path):
    run = harness.analyze(step, jnp.ones((64, 64)), steps=STEPS, warmup=WARMUP, chip="h100")
    stored = run.save(tmp_path / "runs" / "one")
    assert list((stored / "trace").rglob("*.xplane.pb"))
    assert _traces(scratch) == []  # moved into the stored run
    del run
    gc.collect()
    assert list((stored / "trace").rglob("*.xplane.pb"))  # the stored one is the user's


def _bad(x):
    return x @ jnp.ones((5, 6))  # (3, 4) @ (5, 6): does not trace


def test_a_failed_analysis_leaves_no_trace_folder(scratch):
    with pytest.raises(UserError):
        harness.analyze(jax.jit(_bad), jnp.ones((3, 4)), steps=1, warmup=0, chip="h100")
    assert _traces(scratch) == []
