"""Work over the parts of a trace (its lines, its planes, several hosts' traces) in worker
processes, where the host has cores to spare and the parts are large enough to pay for them.

Workers are forked (Linux), so they share the parent's open trace and read their parts from it
themselves; each returns plain arrays, the large ones through files in shared memory
(``/dev/shm``: written once, read once) rather than pickled through a pipe (a third of the
decode's time on a 1 GB trace). A process that has imported jax is not forked (JAX's
runtime threads make forking unsafe): ``harness trace`` never imports it, a capture does. Else,
or for small work, the parts run in this process, one after another, with the same results.
``HARNESS_DECODE_WORKERS`` sets the number of processes (1: none), jax or not.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Sequence

import numpy as np

WORKERS_ENV = "HARNESS_DECODE_WORKERS"
MIN_BYTES = 32 << 20  # below this, forking costs more than it saves (about 30 ms a worker)
SPILL_BYTES = 1 << 20  # arrays this large come back through a file
SHM = "/dev/shm"

_job: tuple | None = None  # (fn, context, parts) of the work in progress, inherited by forks


def workers(size_bytes: int, parts: int) -> int:
    """How many processes to share ``parts`` parts of ``size_bytes`` in all among."""
    told = os.environ.get(WORKERS_ENV)
    if not _can_fork() or multiprocessing.current_process().daemon:  # a worker has none
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
    with tempfile.NamedTemporaryFile(dir=SHM if os.path.isdir(SHM) else None, delete=False,
                                     prefix="harness-decode-") as f:
        return _spill(fn(context, parts[i]), f), f.name


@dataclasses.dataclass(frozen=True)
class _Spilled:
    """An array written to a worker's file: at ``offset``, ``count`` items of ``dtype``."""

    offset: int
    count: int
    dtype: str
    shape: tuple


def _spill(value, f):
    """``value`` with its large arrays written to ``f`` (tuples and dataclasses walked; lists
    and dicts, of names and plans, left as they are)."""
    if isinstance(value, np.ndarray) and value.nbytes >= SPILL_BYTES and value.dtype != object:
        spilled = _Spilled(f.tell(), value.size, value.dtype.str, value.shape)
        np.ascontiguousarray(value).tofile(f)
        return spilled
    return _parts(value, lambda v: _spill(v, f))


def _restore(value, path: str):
    """``_spill`` undone: each spilled array read back from ``path``."""
    if isinstance(value, _Spilled):
        return np.fromfile(path, value.dtype, value.count, offset=value.offset).reshape(
            value.shape)
    return _parts(value, lambda v: _restore(v, path))


def _parts(value, each: Callable):
    """``value`` with ``each`` applied to each item of a tuple or field of a dataclass
    instance; anything else as it is (the walk ``_spill`` and ``_restore`` share)."""
    if isinstance(value, tuple):
        return tuple(each(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{fl.name: each(getattr(value, fl.name))
                                             for fl in dataclasses.fields(value) if fl.init})
    return value


def in_parallel(fn: Callable, context, parts: Sequence, size_bytes: int) -> list:
    """``[fn(context, part) for part in parts]``, in worker processes when ``workers`` says
    so. ``fn`` must be a module-level function; its results are pickled back."""
    n = workers(size_bytes, len(parts))
    if n <= 1:
        return [fn(context, part) for part in parts]
    global _job
    _job = (fn, context, parts)
    out, paths = [], []
    try:
        with multiprocessing.get_context("fork").Pool(n) as pool:
            for value, path in pool.imap(_run, range(len(parts)), chunksize=1):
                paths.append(path)
                out.append(_restore(value, path))
                os.unlink(path)
        return out
    finally:
        _job = None
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)
