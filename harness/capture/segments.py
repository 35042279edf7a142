"""A script's trace in segments, made inside the script's own process (``harness profile``): the
profiler starts at the script's first compilation and is stopped and started again every
``segment_s`` seconds, each segment into its own numbered folder (``segment_dir``), so that a
process that dies loses at most the segment it was in.

The trace cannot start before the script has made jax's backend: ``jax.profiler.start_trace``
makes it, with the ``XLA_FLAGS`` of that moment (the CPU device count), and jax reads its
``JAX_*`` settings when it is imported. So nothing here imports jax: ``after_import`` waits for
the script to import it, then ``SegmentTracer.watch`` listens (``jax.monitoring``) for its first
backend compilation, when the backend surely exists.

Beside each finished segment's trace goes ``capture.json`` in ``harness.capture.steps``' format
(``{"meta": ...}``: this process's environment, the meshes built so far), which
``harness.runs.pipeline.analyze_trace`` reads as it reads any capture's; ``harness.trace.segments``
reads the segments as one trace. While a segment is recorded or written out, ``OPEN`` beside the
segments names it and when it began: a process that ends with it there (killed, aborted, or
interrupted: ``SegmentTracer.close_within``) did not write that segment. Standard library only
at import.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "segment-"
# beside the segments while one is recorded or written out: {"segment": k, "started": epoch s}
OPEN = "open.json"
SEGMENT, STARTED = "segment", "started"  # OPEN's keys
# default seconds per segment: about what a process that dies or is interrupted loses (a busy
# loop's segment takes about as long again to write out, and is lost if it ends meanwhile)
SEGMENT_S = 10.0
# jax.monitoring's event at the end of each backend compilation (jax._src.dispatch names it)
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def segment_dir(root: Path, k: int) -> Path:
    """The folder of segment ``k`` (from 0) of a trace under ``root``."""
    return root / f"{SEGMENT_PREFIX}{k:03d}"


def open_segment(root: Path) -> dict | None:
    """``OPEN``'s record under ``root``: the segment not yet written (None: none)."""
    try:
        found = json.loads((root / OPEN).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get(SEGMENT), int) else None


def write_json(path: Path, value) -> None:
    """``path`` written whole or not at all (a process may die at any moment)."""
    from harness.units import json_text  # standard library only, as this module at import

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json_text(value, indent=2))
    os.replace(tmp, path)


class SegmentTracer:
    """The profiler run in segments under ``root`` from ``begin`` until ``close``; a thread
    starts the next segment every ``segment_s``. ``meta_of()`` gives the meta kept beside each
    finished segment (called once the next segment has started: the time between two segments
    is not in the trace, so it is kept short)."""

    def __init__(self, root: Path, segment_s: float, meta_of: Callable[[], dict]):
        self.root, self.segment_s, self.meta_of = root, segment_s, meta_of
        self.k, self.running, self.closed = 0, False, False
        self._lock = threading.Lock()
        self._done = threading.Event()

    def watch(self, jax) -> None:
        """Begin at jax's first backend compilation (``jax``: the module, just imported)."""
        def on_event(event: str, duration: float, **kwargs) -> None:
            if event == BACKEND_COMPILE_EVENT and not self.running and not self.closed:
                self.begin()

        jax.monitoring.register_event_duration_secs_listener(on_event)

    def begin(self) -> None:
        with self._lock:
            if self.running or self.closed:
                return
            self._start()
        threading.Thread(target=self._rotate, name="harness-segments", daemon=True).start()

    def close(self) -> None:
        """Stop the profiler (the last segment kept); no segment starts after."""
        self._done.set()
        with self._lock:
            self.closed = True
            if self.running:
                self._keep_meta(self._stop())

    def close_within(self, wait_s: float) -> None:
        """Stop the profiler as ``close`` does, but give up after ``wait_s`` (a long segment
        takes tens of seconds to write out), so that the process can end at once: the segment
        not written by then, the open one or one being written out when this is called, stays
        named in ``OPEN``. No segment starts after. For a process about to end."""
        deadline = time.monotonic() + wait_s
        self._done.set()
        if not self._lock.acquire(timeout=wait_s):  # a segment being written; kept: no other
            self.closed = True
            return
        self.closed = True
        if self.running:
            writer = threading.Thread(target=lambda: self._keep_meta(self._stop()),
                                      name="harness-last-segment", daemon=True)
            writer.start()
            writer.join(max(deadline - time.monotonic(), 0.0))

    def _start(self) -> None:
        from harness.capture.profiler import start_lean_trace

        start_lean_trace(segment_dir(self.root, self.k))
        self.running = True
        write_json(self.root / OPEN, {SEGMENT: self.k, STARTED: time.time()})

    def _stop(self) -> int | None:
        """Stop the profiler: the segment it wrote (None: the script had stopped it)."""
        import jax

        self.running = False
        try:
            jax.profiler.stop_trace()
        except RuntimeError as e:  # the script stopped it (its own stop_trace)
            log.warning("the profiler was stopped from outside: %s", e)
            self.closed = True
            return None
        finally:
            (self.root / OPEN).unlink(missing_ok=True)
        self.k += 1
        return self.k - 1

    def _keep_meta(self, k: int | None) -> None:
        from harness.capture.profiler import CAPTURE_FILE

        if k is None:
            return
        try:
            write_json(segment_dir(self.root, k) / CAPTURE_FILE,
                       {"meta": self.meta_of(), "cost_analysis": {}})
        except Exception as e:  # noqa: BLE001 - the trace is kept without its meta
            log.warning("segment %d: meta not written: %s", k, e)

    def _rotate(self) -> None:
        while not self._done.wait(self.segment_s):
            with self._lock:
                if self.closed or not self.running:
                    return
                finished = self._stop()
                if not self.closed:
                    self._start()
                self._keep_meta(finished)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once module ``name`` is imported, by whoever imports it first."""

    def __init__(self, name: str, then: Callable):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the others find it; this finder only wraps its loading
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            try:
                self.then(module)
            except Exception as e:  # noqa: BLE001 - never the script's failure
                log.warning("cannot watch %s: %s", fullname, e)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then: Callable) -> None:
    """Call ``then(module)`` when module ``name`` has been imported (at once if it already is)."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))
