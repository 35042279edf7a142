"""``harness`` command line: a thin layer over the stage functions.

Subcommands live in ``harness/commands/<name>.py``; each module defines
``add_arguments(parser)`` and ``main(args) -> int``. ``COMMANDS`` is the registry (module and
help text); only the chosen command's module is imported. Command modules import jax only inside
``main`` so that ``--devices`` can set ``XLA_FLAGS`` first; a module's ``DEFAULT_DEVICES`` replaces
the default count (None: leave it to what runs, as ``profile`` leaves it to the script). The
options a module names in ``CHECKED`` (output paths, chips) are checked before its ``main`` runs
(``harness.commands.check_options``): a bad one is one line and exit 2 before any work.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from harness.commands import check_options
from harness.devices import quiet_absent_tpu, set_host_device_count
from harness.errors import HarnessError

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.commands.run", "run a registered workload under the profiler, report per op"),
    "trace": ("harness.commands.trace", "per-op table of an existing profiler trace"),
    "profile": ("harness.commands.profile",
                "run your own script under the profiler; report every program it ran"),
    "predict": ("harness.commands.predict", "answer the book's questions: step times, bounds"),
    "predict-hlo": ("harness.commands.predict_hlo",
                    "compile a (real-size) workload on a virtual mesh and cost its HLO on a chip"),
    "explain": ("harness.commands.explain",
                "every collective of a run or trace: source line, mesh axes, why, the book's fix"),
    "memory": ("harness.commands.memory",
               "the peak per device, compiled and the book's, what holds it, the buffers at it"),
    "plan": ("harness.commands.plan",
             "rank a workload's layouts on a chip and slice before running (compiled ahead of "
             "time)"),
    "list": ("harness.commands.list", "list the stored runs"),
    "report": ("harness.commands.report", "re-render a stored run's report"),
    "view": ("harness.commands.view", "open a stored run's trace in the xprof UI"),
    "compare": ("harness.commands.compare",
                "baseline vs candidate runs or directories of them: a verdict per pair"),
    "history": ("harness.commands.history",
                "each point's trend over the nights under a root: change points, their commits, "
                "and the newest night's verdict"),
    "sweep": ("harness.commands.sweep",
              "run a grid of workloads from a TOML file (resumable); summary table and plots"),
    "calibrate": ("harness.commands.calibrate",
                  "measure this host's matmul, memory and collective peaks as the cpu chip"),
    "launch": ("harness.commands.launch",
               "start N local processes of a --distributed command (multi-host rehearsal)"),
}

DEVICES = 8  # virtual CPU devices of a command that runs jax here, unless --devices says


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments give one line (``harness run: error: ...``) and exit 2, not the usage
    block; ``-h`` still prints the full usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser; only the chosen command's module is imported (and adds its arguments)."""
    parser = OneLineParser(
        prog="harness",
        description="Measure JAX programs per XLA op against first-principles roofline "
                    "predictions.",
    )
    parser.add_argument("--devices", type=int, metavar="N",
                        help=f"virtual CPU devices when running on CPU (default {DEVICES}; "
                             f"profile: the script's own)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    # dest "_command": a command may have its own "command" argument (launch's)
    sub = parser.add_subparsers(dest="_command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.devices is not None and args.devices < 1:
        parser.error(f"--devices must be >= 1, got {args.devices}")
    # a command's own default (profile: None, the script's own device count) else DEVICES
    devices = args.devices or getattr(args._module, "DEFAULT_DEVICES", DEVICES)
    if devices is not None:
        set_host_device_count(devices)
    # the command sees the count it runs with; profile keeps None unless --devices was given
    args.devices = devices
    quiet_absent_tpu()
    try:
        check_options(args._module, args)  # before any work: nothing printed, then an error
        return int(args._module.main(args) or 0)
    except (HarnessError, ValueError, KeyError) as e:
        # predictions/ and workloads/ raise ValueError/KeyError naming the valid choices.
        if args.verbose:
            raise
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"harness {args._command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"harness {args._command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
