"""Test session set-up, before anything imports jax: 8 virtual CPU devices, and a private
calibration and compilation cache so tests never read or write the user's
~/.cache/scaling-harness; the private cache is removed when the session ends."""
import atexit
import os
import shutil
import tempfile
from pathlib import Path

from harness.devices import quiet_absent_tpu, set_host_device_count

set_host_device_count(8, keep_existing=True)
quiet_absent_tpu()  # as the harness command does: on this host, jax on the CPU alone
_CACHE = tempfile.mkdtemp(prefix="scaling-harness-test-cache-")
os.environ["SCALING_HARNESS_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# Captured HLO texts and their cost_analysis() (tests/fixtures/hlo/programs.py writes them).
FIXTURES = Path(__file__).parent / "fixtures" / "hlo"


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
