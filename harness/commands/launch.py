"""``harness launch --processes N [--devices-per-process M] -- COMMAND ...``: rehearse a multi-host
run on one machine.

Starts N processes of ``python -m harness --devices M COMMAND ... --distributed --coordinator
127.0.0.1:PORT --num-processes N --process-id i`` (a free port on 127.0.0.1; CPU, gloo
collectives) and forwards their output line by line with a ``[p<i>]`` prefix. When a process
fails, the others are stopped (SIGTERM to their process groups, SIGKILL after ``--grace``
seconds) and launch exits with the failing process's code (128 + signal number when it was
killed), naming it in a one-line message; Ctrl-C (or SIGTERM, SIGHUP to launch) stops them all
(exit 128 + signal number). The processes get their scratch space (``TMPDIR``) in a directory
that launch removes, so a killed process leaves nothing behind. The command may be spelled
``run ...`` or ``harness run ... --distributed``.
"""
from __future__ import annotations

import argparse
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

from harness.errors import HarnessError

DISTRIBUTED_COMMANDS = ("run", "sweep")  # commands that take --distributed
INJECTED = ("--coordinator", "--num-processes", "--process-id", "--devices")
HOST = "127.0.0.1"


def add_arguments(p) -> None:
    p.add_argument("--processes", type=int, default=2, metavar="N",
                   help="processes to start (default 2)")
    p.add_argument("--devices-per-process", type=int, default=4, metavar="M",
                   help="virtual CPU devices per process (default 4)")
    p.add_argument("--grace", type=float, default=5.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL when stopping processes (default 5)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the harness command each process runs: "
                        + ", ".join(DISTRIBUTED_COMMANDS))


def _command(args) -> list[str]:
    cmd = list(args.command)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if cmd[:1] == ["harness"]:  # `-- harness run ...` reads naturally too
        cmd = cmd[1:]
    cmd = [a for a in cmd if a != "--distributed"]  # launch adds it
    name = next((a for a in cmd if not a.startswith("-")), None)
    if name not in DISTRIBUTED_COMMANDS:
        raise HarnessError(f"launch needs a command that takes --distributed after `--`, one of: "
                           f"{', '.join(DISTRIBUTED_COMMANDS)} (e.g. `harness launch -- run "
                           f"collective`); got {' '.join(cmd) or 'nothing'}")
    clash = [a for a in cmd if a.split("=", 1)[0] in INJECTED]
    if clash:
        raise HarnessError(f"launch sets {', '.join(INJECTED)} itself; remove {clash[0]} (use "
                           f"--processes and --devices-per-process)")
    if args.processes < 1 or args.devices_per_process < 1:
        raise HarnessError(f"--processes and --devices-per-process must be >= 1, got "
                           f"{args.processes} and {args.devices_per_process}")
    return cmd


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


def main(args) -> int:
    cmd = _command(args)
    # Stop the processes whatever stops launch (SIGINT may arrive ignored from a background shell).
    stop_signals = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _on_signal,
                    signal.SIGHUP: _on_signal}
    previous = {sig: signal.signal(sig, handler) for sig, handler in stop_signals.items()}
    try:
        return _launch(args, cmd)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _launch(args, cmd: list[str]) -> int:
    n, port = args.processes, _free_port()
    scratch = tempfile.mkdtemp(prefix="harness-launch-")
    print(f"harness launch: {n} processes x {args.devices_per_process} devices, coordinator "
          f"{HOST}:{port}", file=sys.stderr, flush=True)
    procs, readers, ended = [], [], queue.Queue()
    lock = threading.Lock()
    try:
        for i in range(n):
            env = dict(os.environ, TMPDIR=tempfile.mkdtemp(prefix=f"p{i}-", dir=scratch),
                       PYTHONUNBUFFERED="1")
            env.setdefault("JAX_PLATFORMS", "cpu")
            argv = [sys.executable, "-m", "harness", "--devices", str(args.devices_per_process),
                    *cmd, "--distributed", "--coordinator", f"{HOST}:{port}",
                    "--num-processes", str(n), "--process-id", str(i)]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            procs.append(p)
            print(f"harness launch: started p{i} (pid {p.pid})", file=sys.stderr, flush=True)
            for stream, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                t = threading.Thread(target=_forward, args=(stream, f"[p{i}] ", out, lock),
                                     daemon=True)
                t.start()
                readers.append(t)
            threading.Thread(target=lambda i=i, p=p: ended.put((i, p.wait())), daemon=True).start()
        for _ in range(n):
            i, code = _get(ended)
            if code != 0:
                what, rc = _describe(code)
                _stop(procs, args.grace, readers)
                others = (f"stopped the other {n - 1} process{'es' * (n > 2)}" if n > 1 else
                          "no other processes")
                print(f"harness launch: process {i} (pid {procs[i].pid}) {what}; {others}",
                      file=sys.stderr, flush=True)
                return rc
        return 0
    except (KeyboardInterrupt, _Stop) as e:
        signum = e.signum if isinstance(e, _Stop) else signal.SIGINT
        _stop(procs, args.grace, readers)
        print(f"harness launch: got {signal.Signals(signum).name}; stopped {len(procs)} "
              f"processes", file=sys.stderr)
        return 128 + signum
    finally:
        _stop(procs, args.grace, readers)
        shutil.rmtree(scratch, ignore_errors=True)


def _get(q: queue.Queue):
    """``q.get()`` that Ctrl-C can interrupt."""
    while True:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            continue
