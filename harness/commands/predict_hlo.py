"""``harness predict-hlo WORKLOAD``: compile ahead of time, cost the HLO on chips, no run.

A TPU chip with a libtpu topology (``workloads.tpu.TOPOLOGIES``) is compiled for its own slice
by the TPU compiler when libtpu is installed (``--compiler auto``/``tpu``); every other chip, and
every chip with ``--compiler cpu``, costs the HLO of a compile on virtual CPU devices. With
``auto`` the CPU compile also runs beside a TPU one, so the gap to the book can be shown for both.
Each chip's step is its schedule played at the roofline (``harness.step.simulate``), printed
with its exposed communication and critical path beside the per-op sum and the book's step
(``harness.plan.workload.predict_workload``; the report: ``harness.plan.render``).
"""
from __future__ import annotations

import sys

from harness.commands import (
    add_format,
    add_layout,
    add_mesh,
    add_network,
    add_no_compile_cache,
    count,
    deprecated,
    parse_sets,
)
from harness.plan.compiles import COMPILERS, aot_cache_dir
from harness.units import json_text
from predictions import hardware

# checked before anything is compiled (harness.commands.check_options)
CHECKED = {"chips": "chip"}


def add_arguments(p) -> None:
    p.add_argument("workload", help="workload name, e.g. llama_train")
    p.add_argument("--preset", default="tiny", metavar="NAME",
                   help="config preset, e.g. 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    add_mesh(p, default="8x8", what="the target mesh")
    add_layout(p, what="the workload's layout (llama_*; sets its parallelism; default the "
                       "preset's, or the one a mesh named by role implies)")
    p.add_argument("--chip", dest="chips", action="append", default=[], metavar="CHIP",
                   help="chip to predict for (repeatable; default tpu-v5p)")
    p.add_argument("--compiler", choices=sorted(COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in COMPILERS.items()))
    add_no_compile_cache(p, "the same compile when cached ($SCALING_HARNESS_CACHE/aot, "
                            "default ~/.cache/scaling-harness/aot)")
    deprecated(p, "--no-cache", "--no-compile-cache", dest="compile_cache",
               action="store_false")
    p.add_argument("--top", type=count, default=15, metavar="N",
                   help="op rows to print per chip (default 15; 0 = all)")
    add_format(p, ("text", "md", "json"))
    add_network(p)
    p.add_argument("--compile", dest="fit_compiles", type=count, default=1, metavar="N",
                   help="with no remat given: the fit search compiles the settings the memory "
                        "model keeps, cheapest first, until N are placed and uses the cheapest "
                        "(default 1; 0: the ranking alone, nothing compiled); every setting is "
                        "listed ranked under the prediction")


def main(args) -> int:
    import workloads
    from harness.chip.network import declared
    from harness.plan.render import prediction_json, prediction_text
    from harness.plan.workload import predict_workload
    from workloads.base import with_layout

    chips = [hardware.chip_entry(c) for c in (args.chips or ["tpu-v5p"])]
    overrides = with_layout(workloads.get(args.workload), parse_sets(args.sets), args.layout,
                            args.mesh)
    prediction = predict_workload(
        args.workload, args.preset, overrides, args.mesh, chips, args.compiler,
        aot_cache_dir() if args.compile_cache else None,
        lambda line: print(line, file=sys.stderr, flush=True), declared(args),
        args.fit_compiles)
    top = args.top or 1 << 30  # --top 0: every op, as in every command
    if args.format == "json":
        print(json_text(prediction_json(prediction, top), indent=1))
        return 0
    print(prediction_text(prediction, "md" if args.format == "md" else "text", top), end="")
    return 0
