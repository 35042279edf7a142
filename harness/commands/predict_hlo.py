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

import json
import sys

from harness.commands import count, parse_sets
from harness.plan.compiles import COMPILERS, aot_cache_dir
from predictions import hardware


def add_arguments(p) -> None:
    p.add_argument("workload", help="workload name, e.g. llama_train")
    p.add_argument("--preset", default="tiny", help="config preset, e.g. 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--mesh", default="8x8", help="target mesh shape (default 8x8)")
    p.add_argument("--chip", dest="chips", action="append", default=[],
                   help="chip to predict for (repeatable; default tpu-v5p)")
    p.add_argument("--compiler", choices=sorted(COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in COMPILERS.items()))
    p.add_argument("--no-cache", action="store_true",
                   help="compile again even when the same compile is cached "
                        "($SCALING_HARNESS_CACHE/aot, default ~/.cache/scaling-harness/aot)")
    p.add_argument("--top", type=count, default=15, help="op rows to print per chip")
    p.add_argument("--format", choices=["text", "md", "json"], default="text")


def main(args) -> int:
    from harness.plan.render import prediction_json, prediction_text
    from harness.plan.workload import predict_workload

    chips = [hardware.chip_entry(c) for c in (args.chips or ["tpu-v5p"])]
    prediction = predict_workload(
        args.workload, args.preset, parse_sets(args.sets), args.mesh, chips, args.compiler,
        None if args.no_cache else aot_cache_dir(),
        lambda line: print(line, file=sys.stderr, flush=True))
    if args.format == "json":
        print(json.dumps(prediction_json(prediction, args.top), indent=1, default=str))
        return 0
    print(prediction_text(prediction, "md" if args.format == "md" else "text", args.top), end="")
    return 0
