"""Benchmarks session set-up: 8 virtual CPU devices (before jax loads) and the harness plugin.

Run explicitly (the default ``python -m pytest`` collects ``tests/`` only):

    python -m pytest benchmarks/test_bench_matmul.py --benchmark-enable --benchmark-autosave
"""

from harness.devices import set_host_device_count

set_host_device_count(8, keep_existing=True)

# Harmless when the installed package's pytest11 entry point already loaded it (same name).
pytest_plugins = ["harness.pytest_plugin"]
