"""The XLA device-count flag, set in one place (harness.devices), and a jax-free harness import."""
import subprocess
import sys

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
