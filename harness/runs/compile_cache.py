"""JAX's persistent compilation cache for harness runs and sweeps.

XLA compile is most of a small ``harness run`` (3-6 s of 6-10 s for ``llama_train`` tiny);
with the cache a rerun of the same program loads the executable instead of compiling it.
The cache lives in the harness's cache directory (``$SCALING_HARNESS_CACHE`` or
``~/.cache/scaling-harness``, as calibrations do), under ``xla/``. Small programs are cached
too: JAX's defaults skip programs that compile in under a second or are small.
"""
from __future__ import annotations

import logging
from pathlib import Path

from harness.chip.cache import cache_root

log = logging.getLogger(__name__)

SUBDIR = "xla"
# jax config options and the values that make every program cacheable (names as in jax 0.10+).
SETTINGS: dict[str, object] = {
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


def cache_dir() -> Path:
    return cache_root() / SUBDIR


def enable(path: Path | None = None) -> Path:
    """Point jax's persistent compilation cache at ``path`` (default ``cache_dir()``)."""
    import jax

    path = Path(path) if path is not None else cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    for name, value in SETTINGS.items():
        try:
            jax.config.update(name, value)
        except AttributeError:  # an option a jax release does not have: keep its default
            log.info("jax has no option %s; left at its default", name)
    log.info("compilation cache: %s", path)
    return path
