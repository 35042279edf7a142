"""The traced executable's compiler options, per backend (GPU: no command buffers).

No GPU here: the registry is checked as data, and the path that compiles with options and
times the user's own compile is run on CPU through a CPU entry patched into the registry.
"""
import logging

import pytest

from harness.capture import driver, program
from harness.capture.steps import TRACE_COMPILE_OPTIONS, capture, trace_compile_options


def test_gpu_traces_without_command_buffers_and_cpu_with_xla_defaults():
    # an empty list of command types: XLA's GPU backend then builds no command buffers
    assert trace_compile_options("gpu") == {"xla_gpu_enable_command_buffer": ""}
    assert trace_compile_options("cpu") == {}
    assert trace_compile_options("tpu") == {}


def test_command_buffers_option_keeps_xla_defaults():
    assert trace_compile_options("gpu", command_buffers=True) == {}
    assert TRACE_COMPILE_OPTIONS["gpu"] == {"xla_gpu_enable_command_buffer": ""}  # not mutated


def _matmul():
    import jax.numpy as jnp

    return (lambda x: x @ x), (jnp.ones((64, 64), jnp.float32),)


def test_options_compile_the_traced_executable_and_time_the_users(tmp_path, monkeypatch):
    monkeypatch.setitem(TRACE_COMPILE_OPTIONS, "cpu", {"xla_cpu_enable_fast_math": False})
    fn, args = _matmul()
    cap = capture(fn, args, warmup=1, steps=3, out_dir=tmp_path)
    assert cap.meta["compiler_options"] == {"xla_cpu_enable_fast_math": False}
    assert min(cap.meta["step_times_s"]) > 0 and cap.meta["graph_step_s"] > 0


def test_a_refused_option_falls_back_to_xla_defaults(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(TRACE_COMPILE_OPTIONS, "cpu", {"xla_no_such_option_at_all": "1"})
    fn, args = _matmul()
    with caplog.at_level(logging.WARNING, logger=program.__name__):
        cap = capture(fn, args, warmup=1, steps=2, out_dir=tmp_path)
    assert cap.meta["compiler_options"] == {}
    assert "graph_step_s" not in cap.meta
    assert "xla_no_such_option_at_all" in caplog.text


def test_graph_note_when_the_users_executable_differs(monkeypatch):
    # the traced executable steps in 10 ms (step_s), the user's in 12 ms: +20% is worth a note
    times = iter([[0.001], [0.012, 0.012, 0.013]])  # warm-up, the user's three steps
    monkeypatch.setattr(driver.Steps, "times", lambda self, steps: next(times))

    steps = driver.Steps(lambda a, kw: None, (), {}, None, None)
    timing = driver.time_user_compile(lambda a, kw: None, 0.010, steps, 3)
    assert timing["graph_step_s"] == pytest.approx(0.012)  # the median
    assert "+20%" in timing["graph_note"]
