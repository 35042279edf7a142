"""Rehearse a multi-host job on one machine (``harness launch``): N local processes of a
harness command, each one process of the job.

``launch(command, n, m)`` starts N processes of ``python -m harness --devices M COMMAND ...
--distributed --coordinator 127.0.0.1:PORT --num-processes N --process-id i`` (a free port on
127.0.0.1; CPU, gloo collectives) and forwards their output line by line with a ``[p<i>]``
prefix. When a process fails, the others are stopped (SIGTERM to their process groups, SIGKILL
after ``grace`` seconds) and launch returns the failing process's code (128 + signal number when
it was killed), saying which in one line; Ctrl-C (or SIGTERM, SIGHUP) stops them all (128 +
signal number). The processes get their scratch space (``TMPDIR``) in a directory that launch
removes, so a killed process leaves nothing behind.
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TextIO

DISTRIBUTED_COMMANDS = ("run", "sweep")  # commands that take --distributed
INJECTED = ("--coordinator", "--num-processes", "--process-id", "--devices")  # launch sets them
HOST = "127.0.0.1"


def launch(command: list[str], processes: int, devices_per_process: int, grace: float = 5.0,
           say: Callable[[str], None] = lambda line: None, stdout: TextIO | None = None,
           stderr: TextIO | None = None) -> int:
    """Run ``processes`` processes of the harness ``command`` (``["run", "collective"]``,
    without ``--distributed``) until they end; their output goes, line by line, to ``stdout``
    and ``stderr`` (default this process's), launch's own lines to ``say``. The exit code
    (module docstring)."""
    streams = (stdout or sys.stdout, stderr or sys.stderr)
    # Stop the processes whatever stops launch (SIGINT may arrive ignored from a background shell).
    stop_signals = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _on_signal,
                    signal.SIGHUP: _on_signal}
    previous = {sig: signal.signal(sig, handler) for sig, handler in stop_signals.items()}
    try:
        return _launch(command, processes, devices_per_process, grace, say, streams)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _forward(stream, prefix: str, out, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        with lock:
            out.write(prefix + raw.decode(errors="replace").rstrip("\n") + "\n")
            out.flush()
    stream.close()


def _describe(code: int) -> tuple[str, int]:
    """How a process ended, and the exit code launch passes on (128 + n for signal n)."""
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}", 128 - code
    return f"exited with code {code}", code


def _stop(procs: list[subprocess.Popen], grace: float, readers: list[threading.Thread]) -> None:
    """SIGTERM, then SIGKILL, the process groups of the processes still running; then let the
    readers forward what the processes wrote last (so launch's own message comes after it)."""
    alive = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in alive:
            try:
                os.killpg(p.pid, sig)  # each child leads its own group (start_new_session)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = [p for p in alive if p.poll() is None]
        if not alive:
            break
    for t in readers:
        t.join(timeout=2.0)


class _Stop(Exception):
    """launch itself got SIGTERM or SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum, frame):
    raise _Stop(signum)


def _launch(cmd: list[str], n: int, devices: int, grace: float, say: Callable[[str], None],
            streams: tuple[TextIO, TextIO]) -> int:
    port = _free_port()
    scratch = tempfile.mkdtemp(prefix="harness-launch-")
    say(f"{n} processes x {devices} devices, coordinator {HOST}:{port}")
    procs, readers, ended = [], [], queue.Queue()
    lock = threading.Lock()
    try:
        for i in range(n):
            env = dict(os.environ, TMPDIR=tempfile.mkdtemp(prefix=f"p{i}-", dir=scratch),
                       PYTHONUNBUFFERED="1")
            env.setdefault("JAX_PLATFORMS", "cpu")
            argv = [sys.executable, "-m", "harness", "--devices", str(devices),
                    *cmd, "--distributed", "--coordinator", f"{HOST}:{port}",
                    "--num-processes", str(n), "--process-id", str(i)]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            procs.append(p)
            say(f"started p{i} (pid {p.pid})")
            for stream, out in zip((p.stdout, p.stderr), streams):
                t = threading.Thread(target=_forward, args=(stream, f"[p{i}] ", out, lock),
                                     daemon=True)
                t.start()
                readers.append(t)
            threading.Thread(target=lambda i=i, p=p: ended.put((i, p.wait())), daemon=True).start()
        for _ in range(n):
            i, code = _get(ended)
            if code != 0:
                what, rc = _describe(code)
                _stop(procs, grace, readers)
                others = (f"stopped the other {n - 1} process{'es' * (n > 2)}" if n > 1 else
                          "no other processes")
                say(f"process {i} (pid {procs[i].pid}) {what}; {others}")
                return rc
        return 0
    except (KeyboardInterrupt, _Stop) as e:
        signum = e.signum if isinstance(e, _Stop) else signal.SIGINT
        _stop(procs, grace, readers)
        say(f"got {signal.Signals(signum).name}; stopped {len(procs)} processes")
        return 128 + signum
    finally:
        _stop(procs, grace, readers)
        shutil.rmtree(scratch, ignore_errors=True)


def _get(q: queue.Queue):
    """``q.get()`` that Ctrl-C can interrupt."""
    while True:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            continue
