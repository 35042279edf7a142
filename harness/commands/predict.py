"""``harness predict``: the book's first-principles answers from the command line.

    harness predict train --model llama3-70b --chip tpu-v5p --chips 8960 --tokens 15e12 --mfu 0.4
    harness predict decode --model llama3-70b --chip tpu-v5e --chips 8 --batch 32 --context 8192 \
        --int8
    harness predict prefill --model llama3-70b --chip tpu-v5e --chips 16 --tokens 8192 --mfu 0.4
    harness predict collective all-gather --bytes 34e6 --axes 4 --chip tpu-v5e
    harness predict matmul --B 1024 --D 8192 --F 28672 --chip tpu-v5e
    harness predict chips

Each prints the answer, the bound and the formula terms (``--json`` for JSON), as
``harness.plan.book`` gives them. Bad input raises ValueError/KeyError, which ``harness.cli``
turns into one line and exit code 2.
"""
from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from harness.plan import book
from predictions import collectives, hardware, training, transformer


def _num(name: str, text: str | None, integer: bool = False) -> float | int | None:
    """'15e12' -> 1.5e13; ValueError names the flag (argparse's own errors print usage too)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--{name} must be a number, got {text!r}") from None
    if integer:
        if value != int(value):
            raise ValueError(f"--{name} must be a whole number, got {text!r}")
        return int(value)
    return value


def _emit(args, answer) -> int:
    if args.json:
        print(json.dumps(answer.data, indent=2, default=str))
        return 0
    table = Table(title=answer.title, title_justify="left")
    for col in answer.columns:
        table.add_column(col)
    for row in answer.rows:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:  # pipes and files: no wrapping at rich's default 80 columns
        console = Console(width=160)
    console.print(table)
    return 0


def _chip_and_model(args):
    return hardware.chip_entry(args.chip), transformer.model(args.model)


def _train(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, tokens = _num("chips", args.chips, True), _num("tokens", args.tokens)
    mfu, seq = _num("mfu", args.mfu), _num("seq-len", args.seq_len)
    return _emit(args, book.train(chip, cfg, args.model, chips, tokens, mfu, args.dtype, seq,
                                  _num("batch", args.batch), args.strategy, args.axes))


def _precision(args) -> tuple[float, float]:
    return book.precision(args.int8, args.int4, _num("weight-bytes", args.weight_bytes),
                          _num("kv-bytes", args.kv_bytes))


def _decode(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, batch = _num("chips", args.chips, True), _num("batch", args.batch, True)
    context = _num("context", args.context)
    wb, kb = _precision(args)
    return _emit(args, book.decode(chip, cfg, args.model, chips, batch, context, wb, kb,
                                   args.dtype))


def _prefill(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, tokens = _num("chips", args.chips, True), _num("tokens", args.tokens)
    wb, _ = _precision(args)
    return _emit(args, book.prefill(chip, cfg, args.model, chips, tokens, _num("mfu", args.mfu),
                                    wb, args.dtype, _num("seq-len", args.seq_len)))


def _collective(args) -> int:
    nbytes = _num("bytes", args.bytes)
    wrap = {"auto": None, "yes": True, "no": False}[args.wraparound]
    return _emit(args, book.collective(args.kind, nbytes, args.axes, args.chip, wrap,
                                       args.links, args.hops))


def _matmul(args) -> int:
    return _emit(args, book.matmul(_num("B", args.B), _num("D", args.D), _num("F", args.F),
                                   args.chip, args.dtype, args.weight_dtype))


def _chips(args) -> int:
    return _emit(args, book.chip_table())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub = parser.add_subparsers(dest="what", metavar="QUESTION", required=True)

    def model_args(p):
        p.add_argument("--model", required=True, help=f"one of {', '.join(transformer.MODELS)}")
        p.add_argument("--chip", required=True, help=f"one of {', '.join(hardware.CHIPS)}")
        p.add_argument("--chips", required=True, help="number of chips")
        p.add_argument("--dtype", default="bf16", help="compute dtype (default bf16)")

    p = sub.add_parser("train", parents=[common], help="training FLOPs, wall time, step model")
    model_args(p)
    p.add_argument("--tokens", required=True, help="training tokens, e.g. 15e12")
    p.add_argument("--mfu", default="0.4", help="model FLOPs utilisation (default 0.4)")
    p.add_argument("--batch", help="global batch in tokens: adds the step model and memory")
    p.add_argument("--strategy", default="fsdp", choices=training.STRATEGIES)
    p.add_argument("--axes", default="1", help="physical axes M_X (or M_XxM_Y for fsdp_tp)")
    p.add_argument("--seq-len", help="sequence length: adds attention FLOPs")
    p.set_defaults(_run=_train)

    for name, run, helptext in (("decode", _decode, "one decode step"),
                                ("prefill", _prefill, "prefill time")):
        p = sub.add_parser(name, parents=[common], help=helptext)
        model_args(p)
        p.add_argument("--int8", action="store_true", help="int8 weights and KV cache")
        p.add_argument("--int4", action="store_true", help="int4 weights, int8 KV cache")
        p.add_argument("--weight-bytes", help="bytes per parameter (overrides --int8/--int4)")
        p.add_argument("--kv-bytes", help="bytes per KV element")
        p.set_defaults(_run=run)
    decode = sub.choices["decode"]
    decode.add_argument("--batch", required=True, help="concurrent sequences")
    decode.add_argument("--context", required=True, help="cached tokens per sequence")
    prefill = sub.choices["prefill"]
    prefill.add_argument("--tokens", required=True, help="prompt tokens")
    prefill.add_argument("--mfu", default="1.0", help="FLOPs utilisation (default 1.0)")
    prefill.add_argument("--seq-len", help="sequence length: adds attention FLOPs")

    p = sub.add_parser("collective", parents=[common], help="time of one collective")
    p.add_argument("kind", choices=collectives.KINDS + ("ppermute",))
    p.add_argument("--bytes", required=True, help="V: bytes per device (see sharding.md)")
    p.add_argument("--axes", default="1", help="mesh axis sizes, e.g. 4 or 4x4")
    p.add_argument("--chip", required=True)
    p.add_argument("--wraparound", choices=("auto", "yes", "no"), default="auto")
    p.add_argument("--links", type=int, default=1, help="ppermute: links used")
    p.add_argument("--hops", type=int, default=1, help="ppermute: hops to the destination")
    p.set_defaults(_run=_collective)

    p = sub.add_parser("matmul", parents=[common], help="roofline of X[B,D] . W[D,F]")
    for letter in "BDF":
        p.add_argument(f"--{letter}", required=True)
    p.add_argument("--chip", required=True)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--weight-dtype", default=None)
    p.set_defaults(_run=_matmul)

    p = sub.add_parser("chips", parents=[common], help="list the chip registry")
    p.set_defaults(_run=_chips)


def main(args: argparse.Namespace) -> int:
    return args._run(args)
