"""The script's own process under ``harness profile``:
``python -m harness.capture.child ROOT SEGMENT_S SCRIPT [ARGS...]`` runs SCRIPT as ``__main__``
as ``python SCRIPT ARGS`` would (``sys.argv``, ``sys.path[0]`` its folder, the environment it
was given, jax imported when the script imports it), traced in segments under ROOT
(``harness.capture.segments``), every mesh it builds recorded (``harness.capture.meshes``).

How it ends is written to ``ROOT/script.json`` (``STATUS_FILE``): "finished", "exited" (a
non-zero ``sys.exit``), "raised" (its last frames printed to stderr, as Python prints them, from
the script's first frame on) or "interrupted" (SIGINT: ``Interrupt``); a process that dies
writes nothing. The exit status is the script's: 0, its ``sys.exit`` code, 1, or 130.

After SIGINT the process ends at once (``end_now``): the last segment, or one being written out,
is kept if it is written within ``FINISH_WRITING_S`` (a long segment of a busy loop takes tens of
seconds; the first, all the report there can be, ``FIRST_SEGMENT_S``), and the process exits
then, written or not, without running the script's ``atexit`` functions;
``harness.capture.segments.OPEN`` names a segment left out.
"""
from __future__ import annotations

import datetime as dt
import faulthandler
import functools
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

from harness import schema
from harness.capture import environment, interrupt
from harness.capture.interrupt import (
    FINISH_WRITING_S,
    FIRST_SEGMENT_S,
    GRACE_S,
    INTERRUPTED,
    Interrupt,
)
from harness.capture.meshes import MeshLog
from harness.capture.nnx_paths import NnxPaths
from harness.capture.segments import SegmentTracer, after_import, write_json
from harness.errors import HarnessError, one_line

STATUS_FILE = "script.json"
LAST_FRAMES = 5  # frames of a raising script's traceback printed (its last ones)
OUTCOME, CODE, MESSAGE, FRAME = "outcome", "code", "message", "frame"  # STATUS_FILE's keys


def _frames(script: Path, tb):
    """The traceback from the script's first frame on (runpy's and this module's left out)."""
    first = tb
    while first is not None and Path(first.tb_frame.f_code.co_filename) != script:
        first = first.tb_next
    return first or tb


def _last_frame(script: Path, tb) -> str:
    """"mine.py:12 in step": the deepest frame in the script's folder (else the last one)."""
    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if Path(f.filename).is_relative_to(script.parent)]
    last = (mine or frames or [None])[-1]
    if last is None:
        return ""
    line = f":{last.lineno}" if last.lineno is not None else ""  # None: interrupted mid-line
    return f"{Path(last.filename).name}{line} in {last.name}"


def run(script: Path) -> dict:
    """Run ``script`` as ``__main__``; how it ended (``STATUS_FILE``'s keys)."""
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        if e.code in (None, 0):
            return {OUTCOME: "finished", CODE: 0}
        if not isinstance(e.code, int):  # sys.exit("message"): Python prints it, exits 1
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 1
        return {OUTCOME: "exited", CODE: code, MESSAGE: f"exited with status {code}"}
    except BaseException as e:  # noqa: BLE001 - the user's script: shown as Python shows it
        tb = _frames(script, e.__traceback__)
        shown = traceback.TracebackException(type(e), e, tb, limit=-LAST_FRAMES)
        # the SIGINT handler that raised KeyboardInterrupt is no frame of the script's
        shown.stack = traceback.StackSummary.from_list(
            [f for f in shown.stack if f.filename != interrupt.__file__])
        if not isinstance(e, HarnessError):  # the harness's own answer (out of memory) is
            print("".join(shown.format()), end="", file=sys.stderr)  # printed by the parent
        if isinstance(e, KeyboardInterrupt):
            return {OUTCOME: INTERRUPTED, CODE: 130, MESSAGE: "was interrupted by SIGINT",
                    FRAME: _last_frame(script, tb)}
        return {OUTCOME: "raised", CODE: 1, FRAME: _last_frame(script, tb),
                MESSAGE: f"raised {type(e).__name__}: {one_line(e)}"}
    return {OUTCOME: "finished", CODE: 0}


@functools.cache
def _commit(folder: Path) -> dict:
    """The script's commit and dirty flag, asked of git once; outside any checkout it has none
    (not the harness's, nor the working directory's)."""
    return environment.git_state(folder) or {schema.GIT_SHA: ""}


def _meta(script: Path, meshes: MeshLog, started: float, nnx: NnxPaths) -> dict:
    """What each finished segment keeps beside its trace: this process's environment (its
    devices, ``XLA_FLAGS`` as the script left them), the script's commit and meshes, and the
    Flax NNX paths of its ``nnx.jit`` programs' parameters (``harness.capture.nnx_paths``)."""
    found, paths = meshes.snapshot(), nnx.snapshot()
    commit = _commit(script.parent)
    meta = {**environment.environment(), **commit,
            schema.MESHES: found,
            schema.TIME: dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(
                timespec="seconds")}
    if len(found) == 1:  # one mesh: the run's, as a workload's is
        meta[schema.MESH] = found[0]["axes"]
    if paths:  # harness.explain names the parameters by them
        meta[schema.ARGUMENT_PATHS] = paths
    return meta


_ENDING = threading.Lock()  # held by the one thread that ends the process (end_now)


def end_now(tracer: SegmentTracer, status_file: Path, status: dict) -> None:
    """End the process at once with ``status`` (after SIGINT): the trace stopped, its last
    segment kept if written in time (``SegmentTracer.close_within``), the script's output
    flushed. A second caller (the
    SIGINT watcher and the main thread at once) waits for the first to end the process."""
    if not _ENDING.acquire(blocking=False):
        threading.Event().wait()
    tracer.close_within(FINISH_WRITING_S if tracer.k else FIRST_SEGMENT_S)
    write_json(status_file, status)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the script
            pass
    os._exit(status[CODE])


def main(argv: list[str]) -> int:
    root, segment_s, typed, args = Path(argv[0]), float(argv[1]), argv[2], argv[3:]
    script, started = Path(typed).resolve(), time.time()
    meshes, nnx = MeshLog(), NnxPaths()
    tracer = SegmentTracer(root, segment_s, lambda: _meta(script, meshes, started, nnx))

    def watch(jax) -> None:
        meshes.watch(jax.sharding.Mesh)
        tracer.watch(jax)

    after_import("jax", watch)
    after_import("flax.nnx", nnx.watch)  # nothing where the script never imports it
    status_file, status = root / STATUS_FILE, {}
    stuck = {OUTCOME: INTERRUPTED, CODE: 130, MESSAGE: f"was interrupted by SIGINT and, blocked "
                                                       f"outside Python, ended {GRACE_S:g} s later"}
    # the script blocked outside Python, or its last segment being written out: ended now
    sigint = Interrupt(lambda: end_now(tracer, status_file, {
        **stuck, **({MESSAGE: "was interrupted by SIGINT as its trace was written"}
                    if status else {})}))
    faulthandler.enable()  # a fatal signal (XLA's abort) shows where the script was
    sys.argv, sys.path[0] = [typed, *args], str(script.parent)  # as `python SCRIPT ARGS` sets
    status = run(script)
    sigint.script_ended()
    if sigint.at is not None:  # interrupted (even where the script caught KeyboardInterrupt)
        sigint.done()  # ending now: the watcher has nothing to do
        end_now(tracer, status_file, status)
    tracer.close()
    write_json(status_file, status)
    sigint.done()
    return status[CODE]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
