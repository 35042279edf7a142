"""``harness view RUN``: serve a stored run's trace in the xprof UI (trace viewer, op profile)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.errors import HarnessError
from harness.runs import store


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, or run id (prefix) under --root")
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--port", type=int, default=8791, help="port of the web UI (default 8791)")


def xprof_command(trace_dir: Path, port: int) -> list[str]:
    """The xprof standalone server on ``trace_dir`` (it finds plugins/profile/*/ below it)."""
    return [sys.executable, "-m", "xprof.server", "--logdir", str(trace_dir), "--port", str(port)]


def main(args) -> int:
    run = store.resolve(args.run, args.root)
    trace_dir = run / store.TRACE_DIR
    if not any(trace_dir.rglob("*.xplane.pb")):
        raise HarnessError(f"{run}: no trace to view (no {store.TRACE_DIR}/**/*.xplane.pb)")
    print(f"xprof UI for {run.name}: http://localhost:{args.port}/  (Ctrl-C to stop)",
          flush=True)
    try:
        return subprocess.call(xprof_command(trace_dir, args.port))
    except KeyboardInterrupt:
        return 0
