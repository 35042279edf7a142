"""Test session set-up, before anything imports jax: 8 virtual CPU devices, and a private
calibration cache so tests never read or write the user's ~/.cache/scaling-harness."""
import os
import tempfile
from pathlib import Path

from harness.devices import set_host_device_count

set_host_device_count(8, keep_existing=True)
os.environ["SCALING_HARNESS_CACHE"] = tempfile.mkdtemp(prefix="scaling-harness-test-cache-")

# Captured HLO texts and their cost_analysis() (tests/fixtures/hlo/programs.py writes them).
FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
