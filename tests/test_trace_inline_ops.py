"""Ops XLA:CPU runs inline, on the thread that called the program (``harness.trace.cpu``): a
single-device f32 cache update (``c.at[0].set(x)``, [2, 4]) runs on the Python thread's line
of ``/host:CPU``, not on XLA's ``tf_*`` thread pool, so reading the pool's lines alone found no
op of it and the trace had no op executions.

The peer is the profiler's own reading of the same trace: the Chrome trace jax.profiler writes
beside the XSpace (``*.trace.json.gz``), each op event with its ``hlo_op`` and ``hlo_module``.
xprof's ``hlo_stats`` (``tests/xprof_stats.py``) lists no row for a CPU trace at all (none for
an 8-device one either, nor for the 140 MB benchmark trace), so it offers no count here.
"""
from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.capture.profiler import start_lean_trace
from harness.step.waits import waits
from harness.trace.host_events import DISPATCH, host_events
from harness.trace.load import find_trace_file, read_events
from harness.trace.opener import read_xspace

RUNS = 3


@pytest.fixture(scope="module")
def inline_trace(tmp_path_factory):
    """``RUNS`` executions of the update on the first CPU device, traced as ``harness run``
    traces (``start_lean_trace``)."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    c = jax.device_put(jnp.zeros((2, 4), jnp.float32), device)
    x = jax.device_put(jnp.ones((4,), jnp.float32), device)
    f = jax.jit(lambda c, x: c.at[0].set(x))
    f(c, x).block_until_ready()
    out = tmp_path_factory.mktemp("inline")
    start_lean_trace(out)
    for _ in range(RUNS):
        c = f(c, x)
    c.block_until_ready()
    jax.profiler.stop_trace()
    return out


def _profilers_ops(trace) -> pd.DataFrame:
    """The op events of the profiler's own Chrome trace of ``/host:CPU``: thread name,
    program, op, start and duration in ns."""
    path = next(find_trace_file(trace).parent.glob("*.trace.json.gz"))
    events = json.loads(gzip.open(path).read())["traceEvents"]
    pid = next(e["pid"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
               and e["args"]["name"] == "/host:CPU")
    threads = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"
               and e.get("pid") == pid and e["name"] == "thread_name"}
    ops = [e for e in events if e.get("ph") == "X" and e["pid"] == pid
           and "hlo_op" in e.get("args", {})]
    return pd.DataFrame({"thread": [threads[e["tid"]] for e in ops],
                         schema.PROGRAM: [e["args"]["hlo_module"] for e in ops],
                         schema.OP: [e["args"]["hlo_op"] for e in ops],
                         schema.START_NS: [round(e["ts"] * 1000) for e in ops],
                         schema.DURATION_NS: [round(e["dur"] * 1000) for e in ops]})


def test_the_update_runs_on_the_calling_thread(inline_trace):
    """The premise: every op of it is on a line outside XLA's pool."""
    ops = _profilers_ops(inline_trace)
    assert len(ops) >= 2 * RUNS, ops  # a copy and the update, at least, each run
    assert not ops["thread"].str.startswith("tf_").any(), ops["thread"].unique()


def test_inline_ops_are_read_as_the_profiler_reads_them(inline_trace):
    read = read_events(inline_trace)
    got = read.events
    assert read.format == "cpu" and not read.stepped
    expect = _profilers_ops(inline_trace)
    assert len(got) == len(expect)
    assert set(got[schema.DEVICE]) == {0}
    assert sorted(got[schema.STEP].unique()) == list(range(RUNS))  # one step a run
    per_run = len(expect) // RUNS
    assert (got.groupby(schema.STEP).size() == per_run).all()
    mine = got.sort_values(schema.START_NS).reset_index(drop=True)
    theirs = expect.sort_values(schema.START_NS).reset_index(drop=True)
    assert mine[schema.PROGRAM].astype(str).tolist() == theirs[schema.PROGRAM].tolist()
    assert mine[schema.OP].astype(str).tolist() == theirs[schema.OP].tolist()
    # the same clock (the Chrome trace's microseconds carry whole ns)
    np.testing.assert_array_equal(mine[schema.START_NS] - mine[schema.START_NS].iloc[0],
                                  theirs[schema.START_NS] - theirs[schema.START_NS].iloc[0])
    # ran inline, each op completed in its own event: no completion marker lengthens it
    np.testing.assert_array_equal(mine[schema.DURATION_NS], theirs[schema.DURATION_NS])


def _dispatch(trace) -> tuple[np.ndarray, np.ndarray]:
    host = host_events(read_xspace(find_trace_file(trace))[0])
    launch = host[host[schema.KIND] == DISPATCH]
    s = launch[schema.START_NS].to_numpy(np.int64)
    return s, s + launch[schema.DURATION_NS].to_numpy(np.int64)


def test_inline_ops_lie_inside_their_launch_and_are_no_annotation(inline_trace):
    """Each op lies in the caller's Execute event of its run; the host's events name none of
    the ops as the user's work (they are the runtime's, inside its launch)."""
    ev = read_events(inline_trace).events
    host = host_events(read_xspace(find_trace_file(inline_trace))[0])
    assert not host[schema.EVENT_NAME].astype(str).isin(set(ev[schema.OP].astype(str))).any()
    s, e = _dispatch(inline_trace)
    assert len(s) == RUNS
    start = ev[schema.START_NS].to_numpy(np.int64)
    end = start + ev[schema.DURATION_NS].to_numpy(np.int64)
    i = np.searchsorted(s, start, side="right") - 1
    assert (i >= 0).all() and (end <= e[i]).all()
    assert (i == ev[schema.STEP].to_numpy()).all()  # run k's ops in launch k


def test_the_gap_between_runs_counts_the_launch_less_the_ops_as_dispatch(inline_trace):
    """An op on the calling thread is device work, not dispatch: between run k's last op and
    run k+1's first, dispatch is the time the launches cover, worked out here from the
    launches' own intervals; python the rest of the gap."""
    ev = read_events(inline_trace).events
    out, _ = waits(ev, host_events(read_xspace(find_trace_file(inline_trace))[0]))
    s, e = _dispatch(inline_trace)
    start = ev[schema.START_NS].to_numpy(np.int64)
    end = start + ev[schema.DURATION_NS].to_numpy(np.int64)
    step = ev[schema.STEP].to_numpy()
    for k in range(RUNS - 1):
        a, b = end[step == k].max(), start[step == k + 1].min()
        covered = sum(max(0, min(b, hi) - max(a, lo)) for lo, hi in zip(s, e))
        row = out[out[schema.STEP] == k].iloc[0]
        assert row[schema.WAIT_DISPATCH_S] == pytest.approx(covered * 1e-9, abs=1e-12)
        assert row[schema.WAIT_PYTHON_S] == pytest.approx((b - a - covered) * 1e-9, abs=1e-12)


@pytest.mark.filterwarnings("ignore:os.fork")  # jax ran here; the workers only decode
def test_on_the_callers_line_only_events_with_their_own_hlo_op_are_ops(tmp_path, monkeypatch):
    """On the Python line, an event is an op where it carries ``hlo_op`` itself: an
    annotation named as a pool op ("fusion.1", no stats) is not one, nor does it make the
    pool's "fusion.1" events no ops (the pool's kinds are the pool lines' to say); the
    ``Execute``, the completion marker and ``ThunkExecutor`` events are not ops. As the
    reference decoder reads it, lines read apart (workers) or in order."""
    from reference_decode import reference_events, same_events
    from xspace_text import plane, serialize

    from harness.trace import parallel

    us = 1000
    inline = {"hlo_op": "copy.1", "hlo_module": "jit_insert", "device_ordinal": 0,
              "run_id": 9, "program_id": 2, "_p": 77}
    python = [("fusion.1", 900 * us, 50 * us, {}),  # the user's annotation, an op's name
              ("step", 1000 * us, 900 * us, {"step_num": 0}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 1001 * us, 5 * us, {"run_id": 7}),
              ("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice", 1500 * us,
               40 * us, {}),
              ("copy.1", 1510 * us, 6 * us, inline),
              ("end: copy.1", 1515 * us, 0, {"_c": 77}),
              ("ThunkExecutor::Execute (wait for completion)", 1530 * us, 1 * us,
               {"run_id": 9, "device_ordinal": 0})]
    op = {"hlo_module": "jit_f", "device_ordinal": 0, "run_id": 7, "program_id": 1}
    pool = [("fusion.1", 1100 * us, 10 * us, {"hlo_op": "fusion.1", **op}),
            ("dot.2", 1200 * us, 20 * us, {"hlo_op": "dot.2", **op})]
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(serialize(plane("/host:CPU", {"python": python, "tf_XLA/1": pool})))
    expect, _ = reference_events(path)
    assert expect[schema.OP].tolist() == ["copy.1", "fusion.1", "dot.2"]
    assert expect[schema.PROGRAM].tolist() == ["jit_insert", "jit_f", "jit_f"]
    assert expect[schema.DURATION_NS].tolist() == [6 * us, 10 * us, 20 * us]
    assert expect[schema.STEP].tolist() == [0, 0, 0]  # the inline run: the step it opened in
    same_events(read_events(path).events, expect)
    if parallel._can_fork():
        monkeypatch.setenv(parallel.WORKERS_ENV, "2")
        same_events(read_events(path).events, expect)


def test_a_harness_capture_of_it_has_its_ops_in_each_step(tmp_path):
    """Captured as ``harness run`` captures (step annotations; single-device dispatch names no
    run_id, so each run is tied to the step it opened in): every step holds the run's ops."""
    import jax
    import jax.numpy as jnp

    from harness.capture.steps import capture

    device = jax.devices()[0]
    c = jax.device_put(jnp.zeros((2, 4), jnp.float32), device)
    x = jax.device_put(jnp.ones((4,), jnp.float32), device)
    cap = capture(jax.jit(lambda c, x: c.at[0].set(x)), (c, x), warmup=1, steps=RUNS,
                  out_dir=tmp_path)
    read = read_events(cap.trace_dir)
    assert read.stepped
    ev = read.events
    assert set(ev[schema.PROGRAM].astype(str)) == {cap.program}
    assert sorted(ev[schema.STEP].unique()) == list(range(RUNS))
    per_step = ev.groupby(schema.STEP)[schema.OP].apply(lambda s: sorted(s.astype(str)))
    assert len({tuple(v) for v in per_step}) == 1 and len(per_step.iloc[0]) >= 2
