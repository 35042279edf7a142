"""``harness plan [WORKLOAD]``: candidate layouts compiled ahead of time and ranked by their
predicted step, each beside the book's verdict (``harness.plan``).

    harness plan --preset 70b --chip tpu-v5p --topology 4x4x4 --batch 256seq --seq 4096
"""
from __future__ import annotations

import json
import math
import sys

from harness import schema
from harness.commands import predict_hlo
from harness.commands.run import parse_sets
from harness.errors import HarnessError
from harness.report import tables
from predictions import hardware, roofline
from predictions.topology import check_axes

SEQ = "seq"  # --batch 256seq: sequences, not tokens
LONG_CONTEXT = 16384  # tokens per sequence beyond which sequence sharding would be worth trying


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
    p.add_argument("--compiler", choices=sorted(predict_hlo.COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in predict_hlo.COMPILERS.items()))
    p.add_argument("--no-cache", action="store_true",
                   help="compile again even when the same compile is cached")
    p.add_argument("--format", choices=["text", "md", "json"], default="text")


def topology(chip, text: str | None) -> tuple[int, ...]:
    """The slice's physical axes: as given (a TPU slice must be the one libtpu names for its
    chip count, ``workloads.tpu.topology_dims``), by default 64 chips."""
    from workloads import tpu
    from workloads.mesh import parse_shape

    kind = tpu.TOPOLOGIES.get(chip.name)
    if text is None:
        return tpu.topology_dims(64, kind.ndim) if kind else (8,)
    dims = parse_shape(text)
    if kind is None:
        return (math.prod(dims),)
    named = tpu.topology_dims(math.prod(dims), kind.ndim)
    if sorted(dims) != sorted(d for d in named if d > 1 or len(dims) == kind.ndim):
        raise HarnessError(f"--topology {text}: libtpu slices {math.prod(dims)} {chip.name} "
                           f"chips as {'x'.join(map(str, named))}; valid: that shape")
    check_axes(chip, dims)  # ValueError naming the chip's largest slice
    return named


def batch_overrides(batch: str | None, seq: int | None, preset_B: int, preset_T: int) -> dict:
    """``--batch``/``--seq`` as the config's B (sequences) and T (tokens each)."""
    T = seq or preset_T
    if T < 1:
        raise HarnessError(f"--seq must be a positive number of tokens, got {T}")
    if batch is None:
        return {"B": str(preset_B), "T": str(T)}
    text = batch.strip().lower()
    try:
        n = int(text[:-len(SEQ)] if text.endswith(SEQ) else text)
    except ValueError:
        raise HarnessError(f"--batch {batch!r}: give tokens (1048576) or sequences "
                           f"(256{SEQ})") from None
    if n < 1:
        raise HarnessError(f"--batch must be positive, got {batch}")
    if text.endswith(SEQ):
        return {"B": str(n), "T": str(T)}
    if n % T:
        raise HarnessError(f"--batch {n} tokens is not a whole number of {T}-token sequences; "
                           f"valid: a multiple of {T}, or --batch N{SEQ}")
    return {"B": str(n // T), "T": str(T)}


def main(args) -> int:
    import workloads  # deferred: importing workloads imports jax
    from harness.plan import Setting, candidates, plan
    from harness.plan.layouts import check_layouts
    from harness.plan.rank import check_workload, orders_agree
    from workloads import tpu

    check_workload(args.workload)
    layouts = check_layouts(args.layouts)
    chip = hardware.chip_entry(args.chip)
    topo = topology(chip, args.topology)
    preset = workloads.make_config(args.workload, args.preset, parse_sets(args.sets))
    overrides = {**parse_sets(args.sets),
                 **batch_overrides(args.batch, args.seq, preset.B, preset.T)}
    cfg = workloads.make_config(args.workload, args.preset, overrides)
    keys, notes = predict_hlo.plan([chip.name], args.compiler, tpu.libtpu_available())
    tpu_chip = None if keys[chip.name] == predict_hlo.CPU else chip.name
    tokens = cfg.B * cfg.T
    if cfg.T >= LONG_CONTEXT:
        notes.append(f"T={cfg.T}: {args.workload} has no sequence-sharded layout, so none is "
                     "tried")
    setting = Setting(args.workload, args.preset, overrides, chip, topo, tpu_chip,
                      None if args.no_cache else predict_hlo.aot_cache_dir())
    result = plan(setting, candidates(layouts, cfg.F, tokens, topo),
                  lambda line: print(line, file=sys.stderr, flush=True))
    alpha = roofline.critical_intensity(chip, "bf16", "ici")
    head = (f"{args.workload} ({args.preset}) on {chip.name} {'x'.join(map(str, topo))} "
            f"({math.prod(topo)} chips), {'XLA:TPU' if tpu_chip else 'XLA:CPU'} compiles; "
            f"B = {tokens:,} tokens ({cfg.B} x {cfg.T}); alpha = C/W_ici = {alpha:,.0f}")
    agree = orders_agree(result.book_order, result.predicted_order)
    if args.format == "json":
        print(json.dumps({"header": head, "notes": notes, "tokens": tokens,
                          "alpha": alpha, "book_order": result.book_order,
                          "predicted_order": result.predicted_order, "orders_agree": agree,
                          "layouts": json.loads(result.table.to_json(orient="records"))},
                         indent=1))
        return 0
    print(head)
    for note in notes:
        print(note)
    print(tables.render(result.table, "md" if args.format == "md" else "text",
                        schema.PLAN), end="")
    book = " < ".join(" = ".join(group) for group in result.book_order)
    print(f"the book's order: {book or '-'}; the prediction's: "
          f"{' < '.join(result.predicted_order) or '-'} ({'agree' if agree else 'differ'})")
    return 0
