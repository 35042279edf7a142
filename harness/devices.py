"""The XLA flag that gives the CPU backend ``n`` virtual devices, set in one place.

XLA reads it when jax creates its CPU client, so it must be in ``XLA_FLAGS`` before jax is
imported. Standard library only: importing this module never imports jax.
"""
from __future__ import annotations

import logging
import os
import sys

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def with_device_count(flags: str, n: int) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with the device count set to ``n``."""
    kept = [f for f in flags.split() if not f.startswith(DEVICE_COUNT_FLAG)]
    return " ".join(kept + [f"{DEVICE_COUNT_FLAG}={n}"])


def set_host_device_count(n: int, *, keep_existing: bool = False) -> None:
    """Ask XLA's CPU backend for ``n`` virtual devices. Must run before jax is imported.

    ``keep_existing``: leave a device count already in ``XLA_FLAGS`` alone (``n`` is a default,
    as in the test sessions).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if keep_existing and DEVICE_COUNT_FLAG in flags:
        return
    if "jax" in sys.modules:
        logging.getLogger(__name__).warning("jax already imported; --devices %d has no effect", n)
    os.environ["XLA_FLAGS"] = with_device_count(flags, n)
