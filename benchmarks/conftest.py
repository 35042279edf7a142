"""Benchmarks session set-up: 8 virtual CPU devices (before jax loads) and the harness plugin.

Run explicitly (the default ``python -m pytest`` collects ``tests/`` only):

    python -m pytest benchmarks/test_bench_matmul.py --benchmark-enable --benchmark-autosave
"""
import os

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()

# Harmless when the installed package's pytest11 entry point already loaded it (same name).
pytest_plugins = ["harness.pytest_plugin"]
