"""Work over the parts of a trace (its lines, its planes, several hosts' traces) in worker
processes, where the host has cores to spare and the parts are large enough to pay for them.

Workers are forked (Linux), so they share the parent's open trace and read their parts from it
themselves; each returns plain arrays. A process that has imported jax is not forked (JAX's
runtime threads make forking unsafe): ``harness trace`` never imports it, a capture does. Else,
or for small work, the parts run in this process, one after another, with the same results.
``HARNESS_DECODE_WORKERS`` sets the number of processes (1: none), jax or not.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence

WORKERS_ENV = "HARNESS_DECODE_WORKERS"
MIN_BYTES = 32 << 20  # below this, forking costs more than it saves (about 30 ms a worker)

_job: tuple | None = None  # (fn, context, parts) of the work in progress, inherited by forks


def workers(size_bytes: int, parts: int) -> int:
    """How many processes to share ``parts`` parts of ``size_bytes`` in all among."""
    told = os.environ.get(WORKERS_ENV)
    if not _can_fork():
        return 1
    if told:
        return max(1, min(int(told), parts))
    if size_bytes < MIN_BYTES or "jax" in sys.modules:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), parts))


def _can_fork() -> bool:
    return sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


def _run(i: int):
    fn, context, parts = _job
    return fn(context, parts[i])


def in_parallel(fn: Callable, context, parts: Sequence, size_bytes: int) -> list:
    """``[fn(context, part) for part in parts]``, in worker processes when ``workers`` says
    so. ``fn`` must be a module-level function; its results are pickled back."""
    n = workers(size_bytes, len(parts))
    if n <= 1:
        return [fn(context, part) for part in parts]
    global _job
    _job = (fn, context, parts)
    try:
        with multiprocessing.get_context("fork").Pool(n) as pool:
            return pool.map(_run, range(len(parts)), chunksize=1)
    finally:
        _job = None
