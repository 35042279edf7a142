"""Test session set-up, before anything imports jax: 8 virtual CPU devices, and a private
calibration cache so tests never read or write the user's ~/.cache/scaling-harness."""
import os
import tempfile

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()
os.environ["SCALING_HARNESS_CACHE"] = tempfile.mkdtemp(prefix="scaling-harness-test-cache-")


def pytest_collection_modifyitems(config, items):
    """Skip ``@pytest.mark.libtpu`` tests, saying why, where libtpu is not installed."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("libtpu") is not None:
        return
    skip = pytest.mark.skip(reason="needs libtpu to compile for TPU slices: "
                                   "pip install 'scaling-harness[tpu]'")
    for item in items:
        if "libtpu" in item.keywords:
            item.add_marker(skip)
