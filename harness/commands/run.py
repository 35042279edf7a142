"""``harness run WORKLOAD``: build a registered workload, capture it, analyse it, store the run."""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.capture.steps import STEPS
from harness.commands import (
    add_distributed_arguments,
    add_format,
    add_layout,
    add_mesh,
    add_no_compile_cache,
    add_warmup,
    count,
    in_job,
    parse_sets,
)
from harness.errors import HarnessError
from harness.multihost import run as distributed
from harness.report import render, tables
from harness.runs.workload import list_workloads, run_workload

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.


# checked before the workload is built (harness.commands.check_options)
CHECKED = {"chip": "chip", "out": "dir"}


def add_arguments(p) -> None:
    p.add_argument("workload", nargs="?", help="workload name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered workloads and exit")
    p.add_argument("--preset", default="tiny", metavar="NAME",
                   help="named config preset (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    add_mesh(p, what="the device mesh (default: the workload's, every device)")
    add_layout(p, what="the workload's layout (llama_*; sets its parallelism; default the "
                       "preset's, or the one a mesh named by role implies)")
    p.add_argument("--chip", metavar="CHIP",
                   help="predict for this chip (default: the one the run is on)")
    p.add_argument("--steps", type=int, default=STEPS, metavar="N",
                   help=f"measured steps (default {STEPS})")
    add_warmup(p, 2, "untraced warm-up steps before the measured ones")
    p.add_argument("--command-buffers", action="store_true",
                   help="GPU: trace the executable with XLA's command buffers (CUDA graphs) on, "
                        "as compiled by default; its kernels are then attributed to ops from "
                        "the HLO schedule (default: traced without, timed with as well)")
    p.add_argument("--memory", action="store_true",
                   help="add the memory section: the peak per device measured, compiled and "
                        "the book's, what holds it, the buffers at the peak and live bytes over "
                        "the step (a second compile, with XLA's dump; harness memory RUN later "
                        "gives the same)")
    p.add_argument("--out", type=Path, default=Path("results"), metavar="DIR",
                   help="directory that receives the run (default results/)")
    p.add_argument("--top", type=count, default=15, metavar="N",
                   help="op rows to print (default 15; 0 = all)")
    add_format(p, schema.REPORT_FORMATS)
    add_no_compile_cache(p, "JAX's persistent compilation cache in the harness's cache "
                            "directory")
    add_distributed_arguments(p)


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
        if args.memory:
            raise HarnessError("--memory: not with --distributed; run harness memory RUN on "
                               "the stored run instead")
        return _main_distributed(args)
    run = run_workload(args.workload, preset=args.preset, overrides=_overrides(args),
                       mesh=args.mesh, steps=args.steps, warmup=args.warmup, out=args.out,
                       chip=args.chip, command_buffers=args.command_buffers,
                       with_memory=args.memory)
    _print_report(run, args)
    return 0


def _overrides(args) -> dict:
    """``--set`` with the layout of ``--layout`` or of a mesh named by role
    (``workloads.base.with_layout``)."""
    import workloads
    from workloads.base import with_layout

    return with_layout(workloads.get(args.workload), parse_sets(args.sets), args.layout,
                       args.mesh)


def _print_report(run, args) -> None:
    print(render(run, args.format, top=args.top if args.format == "text" else None), end="")
    print(f"report: {run.path / 'report.html'}")


def _main_distributed(args) -> int:
    """One process of a multi-process run; process 0 stores the run and prints the report."""
    def body(cluster) -> int:
        run, path = distributed.run_workload(
            args.workload, cluster=cluster, preset=args.preset, overrides=_overrides(args),
            mesh=args.mesh, steps=args.steps, warmup=args.warmup, out=args.out, chip=args.chip)
        if run is None:
            print(f"process {cluster.process_index} of {cluster.process_count}: per-op tables "
                  f"sent; process 0 stored the run in {path}")
            return 0
        _print_report(run, args)
        return 0

    return in_job(args, "run", body)
