"""Test session set-up, before anything imports jax: 8 virtual CPU devices, and a private
calibration and compilation cache so tests never read or write the user's
~/.cache/scaling-harness; the private cache is removed when the session ends."""
import atexit
import os
import shutil
import tempfile

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()
_CACHE = tempfile.mkdtemp(prefix="scaling-harness-test-cache-")
os.environ["SCALING_HARNESS_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
