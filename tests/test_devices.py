"""The XLA device-count flag, set in one place (harness.devices), and a jax-free harness import."""
import fnmatch
import os
import subprocess
import sys

import pytest

from harness import devices

FLAG = "--xla_force_host_platform_device_count"  # as XLA spells it


def test_device_count_replaces_the_flag_and_keeps_the_others():
    flags = f"--xla_cpu_foo=1 {FLAG}=8 --bar"
    assert devices.with_device_count(flags, 4) == f"--xla_cpu_foo=1 --bar {FLAG}=4"
    assert devices.with_device_count("", 2) == f"{FLAG}=2"


def test_keep_existing_leaves_a_set_count_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"{FLAG}=3")
    devices.set_host_device_count(8, keep_existing=True)
    assert devices.os.environ["XLA_FLAGS"] == f"{FLAG}=3"
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1")
    devices.set_host_device_count(8, keep_existing=True)
    assert devices.os.environ["XLA_FLAGS"] == f"--xla_cpu_foo=1 {FLAG}=8"


def test_importing_harness_loads_neither_jax_nor_pandas_until_a_stage_is_used():
    code = ("import sys, harness; loaded = {'jax', 'pandas'} & set(sys.modules); "
            "harness.load_events; print(sorted(loaded), 'pandas' in sys.modules, "
            "'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    # nothing before; load_events needs pandas (the tables), still no jax
    assert out == ["[]", "True", "False"]


def _host_with(monkeypatch, nodes: list[str]) -> None:
    """A host whose /dev holds ``nodes`` and nothing set yet in the environment."""
    for key in (*devices.NO_TPU_ENV, devices.PLATFORMS_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(devices.glob, "glob",
                        lambda pattern: [n for n in nodes if fnmatch.fnmatch(n, pattern)])


def test_a_host_without_tpus_tells_libtpu_so(monkeypatch):
    _host_with(monkeypatch, ["/dev/nvidia0", "/dev/nvidiactl"])
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "node-a")  # a setting made by the user stays
    devices.quiet_absent_tpu()
    assert devices.os.environ["TPU_WORKER_HOSTNAMES"] == "node-a"
    assert devices.os.environ["TPU_HOST_BOUNDS"] == "1,1,1"
    assert devices.PLATFORMS_ENV not in devices.os.environ  # a GPU host: jax picks its backend


def test_a_host_without_accelerators_runs_jax_on_its_cpu(monkeypatch):
    _host_with(monkeypatch, ["/dev/null", "/dev/nvidiactl"])  # a driver node, no GPU
    devices.quiet_absent_tpu()
    assert devices.os.environ[devices.PLATFORMS_ENV] == "cpu"
    monkeypatch.setenv(devices.PLATFORMS_ENV, "cuda")  # the user's own choice stays
    devices.quiet_absent_tpu()
    assert devices.os.environ[devices.PLATFORMS_ENV] == "cuda"


def test_a_host_with_tpus_is_left_alone(monkeypatch):
    _host_with(monkeypatch, ["/dev/accel0"])
    devices.quiet_absent_tpu()
    assert not {*devices.NO_TPU_ENV, devices.PLATFORMS_ENV} & set(devices.os.environ)


@pytest.mark.libtpu
def test_jax_starts_without_libtpu_warnings_on_a_tpu_less_host():
    code = ("from harness.devices import quiet_absent_tpu; quiet_absent_tpu(); "
            "import jax; print(jax.devices()[0].platform)")
    env = {k: v for k, v in os.environ.items()
           if k not in (*devices.NO_TPU_ENV, devices.PLATFORMS_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "cpu"
    assert "TPU" not in out.stderr, out.stderr  # libtpu's probe said nothing


def test_the_library_quiets_libtpu_but_leaves_the_platform_to_the_user(monkeypatch):
    _host_with(monkeypatch, ["/dev/null"])  # no accelerator: the command would pick the CPU
    devices.quiet_absent_libtpu()
    assert devices.os.environ["TPU_HOST_BOUNDS"] == "1,1,1"
    assert devices.PLATFORMS_ENV not in devices.os.environ


@pytest.mark.libtpu
def test_analyze_from_plain_python_is_as_quiet_as_the_command():
    """A script that imports jax first, then harness, as the README's example does."""
    code = ("import jax, jax.numpy as jnp; import harness; "
            "run = harness.analyze(jax.jit(lambda x: x @ x), jnp.ones((64, 64)), steps=2); "
            "print(jax.devices()[0].platform, run.summary['step_s'] > 0)")
    env = {k: v for k, v in os.environ.items()
           if k not in (*devices.NO_TPU_ENV, devices.PLATFORMS_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, timeout=300)
    assert out.stdout.split() == ["cpu", "True"]
    assert "TPU" not in out.stderr, out.stderr  # libtpu's probe said nothing
