"""``harness plan [WORKLOAD]``: candidate layouts compiled ahead of time and ranked by their
predicted step, each beside the book's verdict (``harness.plan``).

    harness plan --preset 70b --chip tpu-v5p --topology 4x4x4 --batch 256seq --seq 4096
"""
from __future__ import annotations

import json
import sys

from harness.commands import parse_sets
from harness.plan.compiles import COMPILERS, aot_cache_dir
from predictions import hardware


def add_arguments(p) -> None:
    from harness.plan.layouts import LAYOUTS
    from harness.plan.rank import PLANNABLE

    p.add_argument("workload", nargs="?", default="llama_train",
                   help=f"workload to lay out (default llama_train; valid: {', '.join(PLANNABLE)})")
    p.add_argument("--preset", default="tiny", help="config preset, e.g. 8b or 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--chip", default="tpu-v5p", help="chip to plan for (default tpu-v5p)")
    p.add_argument("--topology", default=None,
                   help="the slice, e.g. 4x4x4 (64 v5p chips); for a GPU the chip count "
                        "(default: 64 chips laid out as libtpu slices them)")
    p.add_argument("--batch", default=None,
                   help="global batch in tokens (1048576) or sequences (256seq); default the "
                        "preset's B x T")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence T (default the "
                   "preset's)")
    p.add_argument("--layout", dest="layouts", action="append", default=[],
                   help=f"layout to try (repeatable; default all: {', '.join(LAYOUTS)})")
    p.add_argument("--compiler", choices=sorted(COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in COMPILERS.items()))
    p.add_argument("--no-cache", action="store_true",
                   help="compile again even when the same compile is cached")
    p.add_argument("--format", choices=["text", "md", "json"], default="text")


def main(args) -> int:
    from harness.plan.layouts import check_layouts
    from harness.plan.rank import check_workload
    from harness.plan.render import plan_json, plan_text
    from harness.plan.request import plan_layouts, slice_topology

    check_workload(args.workload)
    layouts = check_layouts(args.layouts)
    chip = hardware.chip_entry(args.chip)
    topo = slice_topology(chip, args.topology)
    result = plan_layouts(args.workload, args.preset, parse_sets(args.sets), chip, topo,
                          args.batch, args.seq, layouts, args.compiler,
                          None if args.no_cache else aot_cache_dir(),
                          lambda line: print(line, file=sys.stderr, flush=True))
    if args.format == "json":
        print(json.dumps(plan_json(result), indent=1))
        return 0
    print(plan_text(result, "md" if args.format == "md" else "text"), end="")
    return 0
