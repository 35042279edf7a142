"""The decode started ahead of its use (``harness.trace.opener.start_decode``): ``harness trace``
forks its decode workers before pandas is imported and takes their results later. Same EVENTS
as a decode run when asked for; nothing on the decode path imports pandas; work never taken is
cleaned away."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.trace import parallel
from harness.trace.codes import numpy_factorize
from harness.trace.load import read_events, read_xspace
from harness.trace.opener import start_decode

FIXTURES = Path(__file__).parent / "fixtures"
# a GPU (H100) and a TPU (v6e) trace; CPU traces are made by jax (conftest's cpu_traces)
TRACES = [FIXTURES / "h100" / "llama_train-100m", FIXTURES / "external" / "tpu-v6e-inference"]
ROOT = Path(__file__).resolve().parent.parent

needs_fork = pytest.mark.skipif(not parallel._can_fork(), reason="no fork here")


@pytest.mark.parametrize("values", [
    np.array([3, 3, 1, 3, 2, 1, 1]),                                 # small ids, out of order
    np.repeat(np.array([-245638905, 2**62, 7, -245638905]), 5),       # run ids: runs, negatives
    np.array([10**12, 5, 10**12]),                                   # ids too far apart to table
    np.array([2, 0, 2], np.int32),
    np.array([4]),
    np.zeros(0, np.int64),
    np.array(["fusion.2", "dot", "fusion.2"], dtype=object),
], ids=["ids", "runs", "far", "int32", "one", "none", "names"])
def test_numpy_factorize_is_pandas_factorize(values):
    """The decode workers' factorize (no pandas there) gives pandas's codes and order."""
    codes, uniques = numpy_factorize(values)
    expected_codes, expected_uniques = pd.factorize(values)
    np.testing.assert_array_equal(codes, expected_codes)
    np.testing.assert_array_equal(np.asarray(uniques), np.asarray(expected_uniques))


@needs_fork
@pytest.mark.filterwarnings("ignore:os.fork")
@pytest.mark.parametrize("which", ["gpu", "tpu", "cpu"])
def test_a_decode_started_early_gives_the_same_events(which, cpu_traces, monkeypatch):
    trace = {"gpu": TRACES[0], "tpu": TRACES[1], "cpu": cpu_traces[0]}[which]
    serial = read_events(trace).events
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    space, label = read_xspace(trace)
    start_decode(space, label)
    started = parallel._started[space]
    assert len(started) == 1
    folder = next(iter(started.values())).folder
    pd.testing.assert_frame_equal(read_events(space).events, serial)
    assert not parallel._started.get(space) and not os.path.exists(folder)  # taken, removed


@needs_fork
@pytest.mark.filterwarnings("ignore:os.fork")
def test_work_started_and_never_taken_is_cleaned_away(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    space, label = read_xspace(TRACES[0])
    start_decode(space, label)
    job = next(iter(parallel._started[space].values()))
    folder, workers = job.folder, job.workers
    del space, job
    gc.collect()
    assert not os.path.exists(folder)
    assert all(not w.is_alive() for w in workers)


def test_a_command_that_fails_before_taking_the_started_decode_ends(tmp_path):
    """Bad input found after the decode started (here an HLO text that is no module) ends
    the command at once with its one line: the workers are killed and their folder goes,
    whatever they were writing."""
    bad = tmp_path / "bad.hlo.txt"
    bad.write_text("HloModule x")
    env = dict(os.environ, **{parallel.WORKERS_ENV: "2"})
    proc = subprocess.Popen([sys.executable, "-m", "harness", "trace", str(TRACES[0]), "--hlo",
                             str(bad)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "expected an ENTRY computation" in err
    assert not list(Path(parallel.SHM).glob(f"{parallel.FOLDER_PREFIX}{proc.pid}-*"))


def test_the_decode_path_imports_no_pandas(cpu_traces):
    """The workers ``start_decode`` forks run the formats' part readers; neither they nor the
    command's start import pandas (the command imports it while they read)."""
    code = f"""
import sys
from harness.commands import trace
from harness.trace.formats import FORMATS
from harness.trace import cpu, gpu, tpu
from harness.trace.opener import read_xspace, start_decode
for path in {[str(t) for t in [*TRACES, cpu_traces[0]]]!r}:
    space, label = read_xspace(path)
    trace_format = start_decode(space, label)  # HARNESS_DECODE_WORKERS=1: starts nothing
    module = {{"cpu": cpu, "gpu": gpu, "tpu": tpu}}[trace_format]
    context, parts, _ = module._work(space)
    read = cpu._read_line if trace_format == "cpu" else module._read_part
    for part in parts:
        read(context, part)
print("pandas" in sys.modules)
"""
    env = dict(os.environ, **{parallel.WORKERS_ENV: "1"})
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
