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
``run ...`` or ``harness run ... --distributed``. The processes: ``harness.multihost.launch``.
"""
from __future__ import annotations

import argparse
import sys

from harness.errors import HarnessError
from harness.multihost.launch import DISTRIBUTED_COMMANDS, INJECTED, launch


def add_arguments(p) -> None:
    p.add_argument("--processes", type=int, default=2, metavar="N",
                   help="processes to start (default 2)")
    p.add_argument("--devices-per-process", type=int, default=4, metavar="N",
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


def main(args) -> int:
    cmd = _command(args)
    return launch(cmd, args.processes, args.devices_per_process, args.grace,
                  lambda line: print(f"harness launch: {line}", file=sys.stderr, flush=True),
                  sys.stdout, sys.stderr)
