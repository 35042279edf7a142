"""Programs made to wait, on CPU (``harness.step.waits``): a jitted step over 8 devices traced
with the harness's profiler options (``host_tracer_level`` 1), with a host sleep between steps,
then fed from a fresh host array each step (a zero-copy ``device_put``: no transfer event, so
the wait is the host's own work between steps, python, not input), each against the same loop
with nothing injected; and two processes (``jax.distributed.initialize``) of which one sleeps
before each step, read as one job as ``harness trace DIR`` reads it: the late process is
named. Each report must name the cause with its time per step within 10% of the delay
injected per step (the host's time between steps as its own clock bounds it), with at most
10% of the delay unexplained; nothing injected, no straggler is named."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from harness import schema

DELAY_S = 0.03
STEPS = 8


def _loop(out: Path, between=None) -> tuple[list[float], list[float]]:
    """Trace ``STEPS`` steps of a sharded jitted step; ``between(i)`` runs on the host before
    step i and gives its input (None: the last one's). Returns, per step after the first, the
    seconds the host spent between the last step's end (its outputs ready) and this step's
    call, by its own clock (a sleep on a loaded host oversleeps, and a thread waits for a
    core), and the same plus the last step's call: a device's idle between two steps starts
    inside that call (where its own ops ended) and ends at the next launch, so the two are
    the host clock's bounds on it."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from harness.capture.profiler import start_lean_trace

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
    step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() + x.sum())
    x = jax.device_put(np.ones((256, 64), np.float32), sharding)
    step(x).block_until_ready()
    start_lean_trace(out)
    took, upto, called, done = [], [], None, None
    for i in range(STEPS):
        fed = between(i, sharding) if between else None
        x = fed if fed is not None else x
        with jax.profiler.StepTraceAnnotation("step", step_num=i):
            now = time.perf_counter()
            if done is not None:
                took.append(now - done)
                upto.append(now - called)
            called = now
            step(x).block_until_ready()
            done = time.perf_counter()
    jax.profiler.stop_trace()
    return took, upto


def _sleep(i, sharding):
    time.sleep(DELAY_S)


PUT_S: list[float] = []  # each put's call as the host's clock measured it (``_feed``)


def _feed(i, sharding):
    """A fresh host array put on the devices, the whole taking DELAY_S on the host; the put's
    call alone is timed into ``PUT_S``."""
    import jax

    host = np.random.default_rng(i).random((256, 64), np.float32)
    t0 = time.perf_counter()
    x = jax.device_put(host, sharding)
    PUT_S.append(time.perf_counter() - t0)
    time.sleep(max(0.0, DELAY_S - (time.perf_counter() - t0)))
    return x


def _step(tmp_path: Path, name: str, between=None) -> tuple[dict, float, float]:
    """The step object of the loop traced, and the median of each of ``_loop``'s bounds on
    the host's time between steps."""
    from harness.runs.pipeline import analyze_trace

    took, upto = _loop(tmp_path / name, between)
    return (analyze_trace(tmp_path / name, chip="cpu").step, float(np.median(took)),
            float(np.median(upto)))


def _report(name, step):
    print(f"{name}: period {step[schema.PERIOD_S] * 1e3:.2f} ms, " + ", ".join(
        f"{c} {step[c] * 1e3:.3f} ms" for c in schema.WAIT_CAUSES if step.get(c)))


def test_a_host_sleep_or_a_host_fed_input_between_steps_is_the_hosts_own_work(tmp_path):
    PUT_S.clear()   # this test's puts only
    base, _, _ = _step(tmp_path, "none")
    _report("nothing injected", base)
    assert not base[schema.STRAGGLERS]
    for name, between in (("sleep", _sleep), ("feed", _feed)):
        step, took, upto = _step(tmp_path, name, between)
        _report(name, step)
        # python (with the put's own call, input, beside it): the host's time between steps
        # as its own clock bounds it (DELAY_S asked: a loaded host oversleeps; the devices'
        # idle starts where their ops ended, inside the last call), within 10% of the delay
        python = step[schema.WAIT_PYTHON_S]
        host = python + step[schema.WAIT_INPUT_S]
        assert took - 0.1 * DELAY_S <= host <= upto + 0.1 * DELAY_S, (name, python, took, upto)
        # the put's call is input, not python: python is the rest of the delay
        assert python >= 0.9 * DELAY_S - step[schema.WAIT_INPUT_S]
        assert step[schema.WAIT_UNEXPLAINED_S] <= 0.1 * DELAY_S
        # a 64 KiB put (256 x 64 x 4 bytes) is jaxlib's call alone, zero-copy on the CPU: the
        # input read is inside that call, so no longer than the longest call the host timed
        # (a fixed bound would be the runner's speed, not the reading); the sleep puts nothing
        assert step[schema.WAIT_INPUT_S] <= (max(PUT_S) if name == "feed" else 0), PUT_S
        assert step[schema.WAIT_BOUND] == "python-bound"
        assert not step[schema.STRAGGLERS]
        assert schema.WAITS_UNTOLD not in step


CHILD = """
import os, sys, time
pid, port, out, delay = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
from harness.multihost.run import initialize
initialize(f"127.0.0.1:{port}", 2, pid, timeout_s=120)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from harness.capture.profiler import start_lean_trace
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
step = jax.jit(lambda x: jnp.tanh(x).sum())
x = jax.make_array_from_callback((64, 64), sharding, lambda i: np.ones((64, 64), np.float32)[i])
step(x).block_until_ready()
start_lean_trace(out)
for i in range(%d):
    if pid == 1:
        time.sleep(delay)
    with jax.profiler.StepTraceAnnotation("step", step_num=i):
        step(x).block_until_ready()
jax.profiler.stop_trace()
""" % STEPS


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_of_two_processes_sleeping_before_each_step_is_named(tmp_path):
    from harness.runs.pipeline import analyze_trace
    from harness.trace.load import find_trace_file

    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    port = _port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(Path(__file__).parents[1]))
    procs = [subprocess.Popen([sys.executable, str(script), str(i), str(port),
                               str(tmp_path / f"p{i}"), str(DELAY_S)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out[-2000:]
    session = tmp_path / "job" / "plugins" / "profile" / "session"
    session.mkdir(parents=True)
    for i in range(2):
        shutil.copy(find_trace_file(tmp_path / f"p{i}"), session / f"host-{i}.xplane.pb")
    step = analyze_trace(tmp_path / "job", chip="cpu").step
    _report("two processes, process 1 late", step)
    late = step[schema.STRAGGLERS]
    assert [(s[schema.STRAGGLER_UNIT], s[schema.STRAGGLER_ID]) for s in late] == [("process", 1)]
    assert abs(late[0][schema.LATE_S] - DELAY_S) <= 0.1 * DELAY_S
    assert step[schema.WAIT_VERDICT].startswith("process 1 reaches each")
    assert step[schema.WAIT_UNEXPLAINED_S] <= 0.1 * DELAY_S
    assert schema.WAITS_UNTOLD not in step  # both processes' launch events were read
