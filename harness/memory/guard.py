"""Out of memory in a user's script ends in an answer (``harness profile``): the script's
process (``python -m harness.memory.guard ROOT SEGMENT_S SCRIPT [ARGS...]``, which is
``harness.capture.child`` with this guard) checks every program jax compiles against the
device's limit, as ``capture.memory.check_fits`` checks a workload's, before it runs.

The limit is ``$SCALING_HARNESS_DEVICE_MEMORY`` where set (so that a CPU host can play a small
device), else the device's ``bytes_limit`` (GPU, TPU); a CPU's share of the host's RAM is not
one (the script runs as it would alone). A program past it, or one XLA refuses with
RESOURCE_EXHAUSTED while compiling, is compiled once more with XLA's dump for what holds its
peak (``report.of_dump``), and the answer (``oom.answer``) is written to ``ROOT/OOM_FILE`` for
``harness profile`` to print; the script gets ``capture.memory.OutOfMemory`` with the same text,
raised from its own line (the harness's frames hidden from jax's traceback), its first line
alone: the process prints it as Python prints a script's exception.
"""
from __future__ import annotations

import json
import logging
import sys
import tempfile
import threading
from pathlib import Path

from harness.capture.memory import OutOfMemory, capacity_bytes, footprint, is_oom
from harness.memory import oom

log = logging.getLogger(__name__)

OOM_FILE = "oom.json"
_BUSY = threading.local()  # compiling again with the dump: not checked


class _Compiled:
    """What ``workloads.aot.memory_stats`` reads, for a ``MeshExecutable``."""

    def __init__(self, executable):
        self._executable = executable

    def memory_analysis(self):
        return self._executable.xla_extension_executable().get_compiled_memory_stats()


def limit(devices) -> int | None:
    """The device limit the guard holds a program to (None: none known): the smallest
    ``capacity_bytes`` of ``devices``, a CPU's share of the host's RAM left out (the script
    runs as it would alone)."""
    limits = [c for d in devices if (c := capacity_bytes(d, host_share=False)) is not None]
    return min(limits) if limits else None


def _dump_report(computation, compile_fn, platform: str):
    """The program's memory report from one more compile with XLA's dump (None: refused)."""
    from harness.memory.dump import DUMP_FLAGS, read_dump
    from harness.memory.report import _capacity, of_dump
    from workloads.aot import memory_stats

    _BUSY.on = True
    try:
        with tempfile.TemporaryDirectory(prefix="harness-memory-") as tmp:
            options = {"xla_dump_to": tmp, **{f.lstrip("-"): True for f in DUMP_FLAGS}}
            exe = compile_fn(computation, options)
            found = read_dump(Path(tmp))
        found.memory = memory_stats(_Compiled(exe))
        found.compiler = f"XLA:{platform.upper()}"
        return of_dump(found, getattr(computation, "_name", "program"), capacity=_capacity(None))
    except Exception as e:  # noqa: BLE001 - XLA refuses it again: its message is the answer
        log.info("no dump of the out-of-memory program: %s", e)
        return None
    finally:
        _BUSY.on = False


def _refuse(root: Path, computation, compile_fn, need, capacity, error: str = ""):
    import jax

    devices = jax.local_devices()
    platform = devices[0].platform if devices else ""
    report = _dump_report(computation, compile_fn, platform)
    name = getattr(computation, "_name", "program")
    given = getattr(computation, "compile_args", {}) or {}
    share = oom.matched_share(given.get("global_in_avals", ()), given.get("global_out_avals", ()))
    err = oom.answer(name, report, need, capacity, devices[0].device_kind if devices else
                     "device", len(devices), error, share)
    record = {"answer": str(err), "need_bytes": err.need, "capacity_bytes": err.capacity,
              "remedies": err.remedies.to_dict(orient="records"),
              "memory": report.to_dict() if report is not None else None}
    try:
        (root / OOM_FILE).write_text(json.dumps(record, default=str))
    except OSError as e:
        log.warning("could not write %s: %s", root / OOM_FILE, e)
        return err
    # the script's own stderr gets the verdict; harness profile prints the rest of the answer
    short = OutOfMemory(f"{str(err).splitlines()[0]}; harness profile reports what holds it and "
                        "the cheapest ways to fit")
    short.need, short.capacity, short.remedies = err.need, err.capacity, err.remedies
    return short


def install(root: Path, jax) -> None:
    """Wrap jax's one compile path (``MeshComputation.compile``: jit calls and ``.compile()``)
    with the check."""
    from jax._src import traceback_util
    from jax._src.interpreters import pxla

    from workloads.aot import memory_stats

    original = pxla.MeshComputation.compile
    traceback_util.register_exclusion(str(Path(__file__).resolve().parents[2]))

    def compile_fn(computation, options):
        return original(computation, options)

    def guarded(self, compiler_options=None, *, device_assignment=None):
        if getattr(_BUSY, "on", False):
            return original(self, compiler_options, device_assignment=device_assignment)
        try:
            exe = original(self, compiler_options, device_assignment=device_assignment)
        except Exception as e:
            if not is_oom(e):
                raise
            raise _refuse(root, self, compile_fn, None, None, str(e)) from None
        stats = memory_stats(_Compiled(exe))
        need, have = (int(footprint(stats)) if stats else None), limit(jax.local_devices())
        if need is not None and have is not None and need > have:
            raise _refuse(root, self, compile_fn, need, have)
        return exe

    pxla.MeshComputation.compile = guarded


def main(argv: list[str]) -> int:
    """``harness.capture.child``'s ``main`` with the guard installed once jax is imported."""
    from harness.capture import child
    from harness.capture.segments import after_import

    root = Path(argv[0])

    def _install(jax) -> None:
        try:
            install(root, jax)
        except Exception as e:  # noqa: BLE001 - another jax: the script runs unguarded
            log.warning("the out-of-memory guard is not installed: %s", e)

    after_import("jax", _install)
    return child.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
