"""``harness run WORKLOAD``: build a registered workload, capture it, analyse it, store the run."""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

from harness import report
from harness.capture import STEPS
from harness.commands import count
from harness.errors import HarnessError, one_line
from harness.multihost import run as distributed
from harness.report import tables
from harness.runs.run import list_workloads, run_workload

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["B=128", "dtype=bf16"]`` -> ``{"B": "128", "dtype": "bf16"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HarnessError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def add_arguments(p) -> None:
    p.add_argument("workload", nargs="?", help="workload name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered workloads and exit")
    p.add_argument("--preset", default="tiny", help="named config preset (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    p.add_argument("--mesh", help="mesh shape such as 4x2 (default: the workload's)")
    p.add_argument("--chip", help="predict for this chip (default: the one the run is on)")
    p.add_argument("--steps", type=int, default=STEPS, help=f"measured steps (default {STEPS})")
    p.add_argument("--warmup", type=int, default=2, help="untraced warm-up steps (default 2)")
    p.add_argument("--command-buffers", action="store_true",
                   help="GPU: trace the executable with XLA's command buffers (CUDA graphs) on, "
                        "as compiled by default; its kernels are then attributed to ops from "
                        "the HLO schedule (default: traced without, timed with as well)")
    p.add_argument("--out", type=Path, default=Path("results"),
                   help="directory that receives the run (default results/)")
    p.add_argument("--top", type=count, default=15, help="op rows to print (default 15; 0 = all)")
    p.add_argument("--format", choices=sorted(report.FORMATS), default="text")
    p.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                   help="compile every program afresh (default: reuse JAX's persistent "
                        "compilation cache in the harness's cache directory)")
    g = p.add_argument_group("multi-host (jax.distributed; see `harness launch` to rehearse)")
    g.add_argument("--distributed", action="store_true",
                   help="run as one process of a multi-process JAX job; without the next three "
                        "options the job is auto-detected (TPU VM, SLURM, Open MPI)")
    g.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address and a port")
    g.add_argument("--num-processes", type=int, metavar="N", help="processes in the job")
    g.add_argument("--process-id", type=int, metavar="I", help="this process, 0..N-1")
    g.add_argument("--init-timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for every process to join (default 300)")


def main(args) -> int:
    if args.list or not args.workload:
        print(tables.to_text(list_workloads(), title="workloads"), end="")
        if not args.list:
            raise HarnessError("name a workload to run (listed above)")
        return 0
    if args.compile_cache:
        from harness.runs import compile_cache

        compile_cache.enable()
    if args.distributed:
        return _main_distributed(args)
    analysis, path = run_workload(args.workload, preset=args.preset,
                                  overrides=parse_sets(args.sets), mesh=args.mesh,
                                  steps=args.steps, warmup=args.warmup, out=args.out,
                                  chip=args.chip, command_buffers=args.command_buffers)
    _print_report(analysis, path, args)
    return 0


def _print_report(analysis, path, args) -> None:
    if args.format == "text":
        print(report.to_text(analysis.report, top=args.top), end="")
    else:
        print(report.render(analysis.report, args.format), end="")
    print(f"report: {path / 'report.html'}")


def _main_distributed(args) -> int:
    """One process of a multi-process run; process 0 stores the run and prints the report.

    A process that fails after joining the job leaves at once (``distributed.leave``): its peers
    may be waiting for it in a collective, and jax's exit would wait for them.
    """
    def timed_out(message: str) -> None:
        print(f"harness run: error: {message}", file=sys.stderr)

    who = "this process" if args.process_id is None else f"process {args.process_id}"
    try:
        cluster = distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                                         timeout_s=args.init_timeout, on_timeout=timed_out)
        who = f"process {cluster.process_index}"
        analysis, path = distributed.run_workload(
            args.workload, cluster=cluster, preset=args.preset, overrides=parse_sets(args.sets),
            mesh=args.mesh, steps=args.steps, warmup=args.warmup, out=args.out, chip=args.chip)
    except BaseException as e:
        if not distributed.joined():
            raise  # nothing started yet: the CLI reports it
        import jax

        if isinstance(e, (HarnessError, ValueError, KeyError, jax.errors.JaxRuntimeError)):
            # A runtime error here is mostly a peer gone in mid-collective: one line is enough.
            message = e.args[0] if isinstance(e, KeyError) and e.args else one_line(e)
            print(f"harness run: error: {who}: {message}", file=sys.stderr)
            distributed.leave(2)
        if isinstance(e, KeyboardInterrupt):
            print(f"harness run: {who} interrupted", file=sys.stderr)
            distributed.leave(130)
        traceback.print_exc()
        distributed.leave(1)
    if analysis is None:
        print(f"{who} of {cluster.process_count}: per-op tables sent; process 0 stored the run "
              f"in {path}")
        return 0
    _print_report(analysis, path, args)
    return 0
