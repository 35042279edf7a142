"""``harness plan [WORKLOAD]``: candidate layouts compiled ahead of time and ranked by their
predicted step, each beside the book's verdict (``harness.plan``).

    harness plan --preset 70b --chip tpu-v5p --topology 4x4x4 --batch 256seq --seq-len 4096
    harness plan --chip tpu-v5p --topology 2x2x1 --slices 2 --batch 64seq   # two slices, DCN
    harness plan --chip h100 --nodes 32 --batch 512seq                      # 256 GPUs
    harness plan llama_decode --preset 70b --chip tpu-v5e --topology 4x2 --set int8_weights=true \
        --set int8_kv=true --html serve.html          # serving layouts, the frontier drawn
"""
from __future__ import annotations

import sys
from pathlib import Path

from harness.commands import (
    add_format,
    add_layout,
    add_network,
    add_no_compile_cache,
    deprecated,
    parse_sets,
)
from harness.errors import HarnessError
from harness.plan.compiles import COMPILERS, aot_cache_dir
from harness.units import json_text
from predictions import hardware

# checked before anything is compiled (harness.commands.check_options)
CHECKED = {"chip": "chip", "html": "file"}


def add_arguments(p) -> None:
    from harness.plan.rank import PLANNABLE
    from harness.plan.serve_plan import PLANNED
    from predictions.layouts import planned

    p.add_argument("workload", nargs="?", default="llama_train",
                   help=f"workload to lay out (default llama_train; valid: "
                        f"{', '.join([*PLANNABLE, *PLANNED])})")
    p.add_argument("--preset", default="tiny", metavar="NAME",
                   help="config preset, e.g. 8b or 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    p.add_argument("--chip", default="tpu-v5p", metavar="CHIP",
                   help="chip to plan for (default tpu-v5p)")
    p.add_argument("--topology", default=None, metavar="SHAPE",
                   help="the slice, e.g. 4x4x4 (64 v5p chips); for a GPU the chip count "
                        "(default: 64 chips laid out as libtpu slices them)")
    p.add_argument("--batch", default=None, metavar="N",
                   help="global batch in tokens (1048576) or sequences (256seq); default the "
                        "preset's B x T")
    p.add_argument("--seq-len", dest="seq", type=int, default=None, metavar="T",
                   help="tokens per sequence (default the preset's)")
    deprecated(p, "--seq", "--seq-len", dest="seq", type=int)
    add_layout(p, repeat=True, what="a layout to try (repeatable; default "
                                    f"{', '.join(planned())})")
    p.add_argument("--compiler", choices=sorted(COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in COMPILERS.items()))
    add_no_compile_cache(p, "the same compile when cached ($SCALING_HARNESS_CACHE/aot, "
                            "default ~/.cache/scaling-harness/aot)")
    deprecated(p, "--no-cache", "--no-compile-cache", dest="compile_cache",
               action="store_false")
    add_format(p, ("text", "md", "json"))
    add_network(p)
    p.add_argument("--compile", dest="compile_top", type=int, default=0, metavar="N",
                   help="llama_decode: compile the N serving layouts ranked first that fit "
                        "(default 0: the book's arithmetic only; a real-size compile takes "
                        "minutes)")
    p.add_argument("--html", type=Path, default=None, metavar="FILE",
                   help="llama_decode: also write the HTML page, the frontier drawn, here")


def _serve(args) -> int:
    """``harness plan llama_decode``: the serving layouts by the book's arithmetic
    (``harness.plan.serve_plan``), the frontier beside them."""
    from harness.plan.compiles import CPU, compile_keys
    from harness.plan.request import slice_topology
    from harness.plan.serve_plan import plan_serving, serve_plan_json
    from harness.plan.serve_render import serve_plan_html, serve_plan_text
    from workloads import tpu

    chip = hardware.chip_entry(args.chip)
    keys, notes = compile_keys([chip.name], args.compiler, tpu.libtpu_available())
    result = plan_serving(args.workload, args.preset, parse_sets(args.sets), chip,
                          slice_topology(chip, args.topology), args.batch, args.seq,
                          args.compile_top, None if keys[chip.name] == CPU else chip.name,
                          aot_cache_dir() if args.compile_cache else None,
                          lambda line: print(line, file=sys.stderr, flush=True))
    if args.compile_top:
        result.notes += notes
    if args.html is not None:
        args.html.write_text(serve_plan_html(result))
    if args.format == "json":
        print(json_text(serve_plan_json(result), indent=1))
        return 0
    print(serve_plan_text(result, "md" if args.format == "md" else "text"), end="")
    return 0


# workloads planned another way than llama_train's layouts (the rest: main)
PLANS = {"llama_decode": _serve}


def main(args) -> int:
    if args.workload in PLANS:
        return PLANS[args.workload](args)
    if args.html is not None or args.compile_top:
        raise HarnessError(f"--html and --compile are for {', '.join(PLANS)}; {args.workload} "
                           f"compiles every layout and writes text, md or json")
    return _layouts(args)


def _layouts(args) -> int:
    from harness.chip.network import declared
    from harness.plan.layouts import check_layouts
    from harness.plan.rank import check_workload
    from harness.plan.render import plan_json, plan_text
    from harness.plan.request import job_topology, plan_layouts, slice_topology

    check_workload(args.workload)
    layouts = check_layouts(args.layouts)
    chip = hardware.chip_entry(args.chip)
    topo, system = job_topology(chip, slice_topology(chip, args.topology),
                                args.topology is not None, declared(args))
    result = plan_layouts(args.workload, args.preset, parse_sets(args.sets), chip, topo,
                          args.batch, args.seq, layouts, args.compiler,
                          aot_cache_dir() if args.compile_cache else None,
                          lambda line: print(line, file=sys.stderr, flush=True), system)
    if args.format == "json":
        print(json_text(plan_json(result), indent=1))
        return 0
    print(plan_text(result, "md" if args.format == "md" else "text"), end="")
    return 0
