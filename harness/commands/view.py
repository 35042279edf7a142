"""``harness view RUN``: serve a stored run's trace in the xprof UI (trace viewer, op profile).

The UI listens on loopback (127.0.0.1) unless ``--host`` says otherwise: traces hold program
text and timings that should not be readable by everyone on the network.
"""
from __future__ import annotations

import ipaddress
import signal
import socket
import subprocess
import sys
from pathlib import Path

from harness.errors import HarnessError
from harness.record import store

LOOPBACK = "127.0.0.1"


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, or run id (prefix) under --root")
    p.add_argument("--root", type=Path, default=Path("results"), metavar="DIR",
                   help="results directory (default results/)")
    p.add_argument("--port", type=int, default=8791, metavar="N",
                   help="port of the web UI (default 8791; 0 = any free port)")
    p.add_argument("--host", default=LOOPBACK, metavar="ADDRESS",
                   help="address to listen on (default 127.0.0.1, this machine only; "
                        "0.0.0.0 serves every network the machine is on)")


def xprof_command(trace_dir: Path, port: int, host: str = LOOPBACK) -> list[str]:
    """The xprof UI on ``trace_dir`` (it finds plugins/profile/*/ below it), bound to ``host``."""
    return [sys.executable, "-m", "harness.trace.serve", str(trace_dir), host, str(port)]


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def claim_port(host: str, port: int) -> int:
    """The port to serve on: ``port`` if it is free on ``host`` (one-line error if not), or a
    free one for ``port`` 0."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise HarnessError(f"--port {port} on {host}: {e.strerror or e}; pick another port "
                               "with --port (0 = any free port)") from None
        return s.getsockname()[1]


def main(args) -> int:
    run = store.resolve(args.run, args.root)
    trace_dir = run / store.TRACE_DIR
    if not any(trace_dir.rglob("*.xplane.pb")):
        raise HarnessError(f"{run}: no trace to view (no {store.TRACE_DIR}/**/*.xplane.pb)")
    if not 0 <= args.port < 65536:
        raise HarnessError(f"--port {args.port}: must be 0 to 65535")
    port = claim_port(args.host, args.port)
    if not is_loopback(args.host):
        print(f"harness view: warning: serving on {args.host}: anyone who can reach this "
              "machine can read the trace", file=sys.stderr)
    shown = "localhost" if is_loopback(args.host) else args.host
    print(f"xprof UI for {run.name}: http://{shown}:{port}/  (Ctrl-C to stop)", flush=True)
    return serve(xprof_command(trace_dir, port, args.host))


def _stop(signum, frame):
    raise KeyboardInterrupt


def serve(cmd: list[str]) -> int:
    """Run the server until it exits, or until Ctrl-C or SIGTERM, which stop it too."""
    previous = signal.signal(signal.SIGTERM, _stop)
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
