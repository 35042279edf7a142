"""The harness's cache directory on this host: saved CPU calibrations (``cpu-<N>.json``) and
JAX's persistent compilation cache live under it."""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SCALING_HARNESS_CACHE"


def cache_root() -> Path:
    """The harness's cache directory: ``$SCALING_HARNESS_CACHE`` or ``~/.cache/scaling-harness``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "scaling-harness")


def cache_path(device_count: int) -> Path:
    """``$SCALING_HARNESS_CACHE/cpu-<N>.json`` (default ``~/.cache/scaling-harness/``): this
    host's calibration for ``device_count`` devices."""
    return cache_root() / f"cpu-{device_count}.json"
