"""Work over the parts of a trace (its lines, its planes, several hosts' traces) in worker
processes, where the host has cores to spare and the parts are large enough to pay for them.

Workers are forked (Linux), so they share the parent's open trace and read their parts from it
themselves; each writes its results to files in shared memory (``/dev/shm``: written once,
read once; large arrays raw, the rest pickled) rather than through a pipe (pickling them took a
third of the decode's time on a 1 GB trace). Workers share no pipe or lock with the parent, so
work dropped unfinished (its workers killed) cannot leave the parent waiting. A process that
has imported jax is not forked (JAX's runtime threads make forking unsafe): ``harness trace``
never imports it, a capture does. Else, or for small work, the parts run in this process, one
after another, with the same results. ``HARNESS_DECODE_WORKERS`` sets the number of processes
(1: none), jax or not.

Work can also be started ahead of the code that uses it (``start``): ``harness trace`` starts a
format's decode as soon as the trace is opened, then imports pandas and the analysis while the
workers read; ``in_parallel`` with the same owner (the trace's ``Space``) and function takes
their results. The workers are forked before those imports, so the decode path imports neither
pandas nor jax. ``aside`` runs one piece of an analysis in one worker while the caller does
the rest (``harness.step.figures``: the step's waits beside its timeline), where a core is
spare: after the decode the caller alone would leave the others idle.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Sequence

import numpy as np

WORKERS_ENV = "HARNESS_DECODE_WORKERS"
MIN_BYTES = 32 << 20  # below this, forking costs more than it saves (about 30 ms a worker)
SPILL_BYTES = 1 << 20  # arrays this large come back through a file
SHM = "/dev/shm"
FOLDER_PREFIX = "harness-decode-"  # a job's folder there: this prefix, the parent's pid, -

_job: tuple | None = None  # (fn, context, parts, folder) of the work being forked, inherited
_started: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # owner -> {fn: Started}


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


def _work_through(count: int) -> None:
    """A worker's loop: claim the next part no worker has (a file created exclusively: no
    lock, no pipe), read it, write its result beside the claim; until none is left."""
    fn, context, parts, folder = _job
    for i in range(count):
        base = os.path.join(folder, str(i))
        try:
            os.close(os.open(base + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        try:
            with open(base + ".arrays", "wb") as f:
                value, suffix = _spill(fn(context, parts[i]), f), ".result"
        except Exception as e:  # raised where the result is taken, as it would be here
            value, suffix = e, ".error"
        with open(base + ".tmp", "wb") as f:
            try:
                pickle.dump(value, f)
            except Exception as e:
                f.seek(0), f.truncate()
                pickle.dump(RuntimeError(f"reading part {i}: {value!r} ({e})"), f)
                suffix = ".error"
        os.rename(base + ".tmp", base + suffix)  # whole, or not there


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


class Started:
    """Work running in worker processes: ``results()`` waits for them and gives each part's
    result in the parts' order (a part's error raised as the worker raised it). Workers share
    nothing but a folder of this job's own (in ``/dev/shm``): each claims parts by creating a
    file, writes each result to files there; the folder goes once the results are read, or
    with the workers (killed) when the work is dropped unread."""

    def __init__(self, fn: Callable, context, parts: Sequence, n: int):
        global _job
        self.count = len(parts)
        self.folder = tempfile.mkdtemp(dir=SHM if os.path.isdir(SHM) else None,
                                       prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        fork = multiprocessing.get_context("fork")
        _job = (fn, context, parts, self.folder)
        try:  # every worker is forked here, with _job as it is now
            self.workers = [fork.Process(target=_work_through, args=(self.count,), daemon=True)
                            for _ in range(n)]
            for w in self.workers:
                w.start()
        finally:
            _job = None
        self._done = weakref.finalize(self, _close, self.workers, self.folder)

    def results(self) -> list:
        try:
            for w in self.workers:
                w.join()
            return [self._taken(i) for i in range(self.count)]
        finally:
            self._done()

    def _taken(self, i: int):
        """Part ``i``'s result read back, its files removed at once (``/dev/shm`` is memory)."""
        base = os.path.join(self.folder, str(i))
        if os.path.exists(base + ".error"):
            with open(base + ".error", "rb") as f:
                raise pickle.load(f)
        if not os.path.exists(base + ".result"):
            codes = sorted({w.exitcode for w in self.workers} - {0})
            raise RuntimeError(f"a decode worker process ended (exit code {codes}: out of "
                               f"memory?) before reading part {i} of {self.count}")
        with open(base + ".result", "rb") as f:
            value = _restore(pickle.load(f), base + ".arrays")
        os.unlink(base + ".arrays")
        return value


def _close(workers: list, folder: str) -> None:
    for w in workers:
        if w.is_alive():
            w.kill()
        w.join()
    shutil.rmtree(folder, ignore_errors=True)


def start(owner, fn: Callable, context, parts: Sequence, size_bytes: int) -> bool:
    """Start ``in_parallel(fn, context, parts, size_bytes)`` in worker processes now and
    return at once; ``in_parallel(..., owner=owner)`` with the same ``fn`` takes its results.
    False, starting nothing, where ``workers`` gives one process (the work then runs when
    asked for)."""
    n = workers(size_bytes, len(parts))
    if n <= 1:
        return False
    _started.setdefault(owner, {})[fn] = Started(fn, context, parts, n)
    return True


def aside(fn: Callable, context, size_bytes: int) -> Callable[[], object] | None:
    """Start ``fn(context, None)`` in one worker process, beside the caller's own work (an
    analysis whose parts need not wait on each other), where ``workers`` gives two or more
    processes for ``size_bytes`` of work; return a function that waits for its result (its
    error raised as the worker raised it). None, starting nothing, where it would not pay:
    the caller runs it itself."""
    if workers(size_bytes, 2) <= 1:
        return None
    begun = Started(fn, context, [None], 1)
    return lambda: begun.results()[0]


def started(owner) -> bool:
    """Whether work ``start`` began for ``owner`` is running, not yet taken."""
    return bool(_started.get(owner))


def in_parallel(fn: Callable, context, parts: Sequence, size_bytes: int, owner=None) -> list:
    """``[fn(context, part) for part in parts]``, in worker processes when ``workers`` says
    so, or taken from the work ``start`` began for ``owner`` and ``fn``. ``fn`` must be a
    module-level function; its results are pickled back."""
    begun = _started.get(owner, {}).pop(fn, None) if owner is not None else None
    if begun is not None:
        return begun.results()
    n = workers(size_bytes, len(parts))
    if n <= 1:
        return [fn(context, part) for part in parts]
    return Started(fn, context, parts, n).results()
