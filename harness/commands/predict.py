"""``harness predict``: the book's first-principles answers from the command line.

    harness predict train --model llama3-70b --chip tpu-v5p --num-chips 8960 --tokens 15e12 \
        --mfu 0.4
    harness predict decode --model llama3-70b --chip tpu-v5e --num-chips 8 --batch 32 \
        --context 8192 --int8
    harness predict prefill --model llama3-70b --chip tpu-v5e --num-chips 16 --tokens 8192 \
        --mfu 0.4
    harness predict collective all-gather --bytes 34e6 --mesh X=4 --chip tpu-v5e
    harness predict collective all-gather --bytes 67.1e6 --mesh X=32,Y=8 --over X --chip h100 \
        --system dgx-h100-superpod
    harness predict matmul --B 1024 --D 8192 --F 28672 --chip tpu-v5e
    harness predict pipeline --model llama3-405b --chip h100 --mesh stage=16,model=8,data=128 \
        --batch 16e6 --microbatches 16
    harness predict serve --model llama3-70b --chip tpu-v5e --context 8192 --generate 512
    harness predict speculative --acceptance 0.8 --draft-tokens 4 --draft-cost 0.05
    harness predict moe --model deepseek_v3 --chip h100 --system h800-cluster \
        --mesh stage=16,data=2,expert=64
    harness predict chips

Each prints the answer, the bound and the formula terms (``--format json``/``md``/``csv``), as
``harness.plan.book`` gives them. Bad input raises ValueError/KeyError, which ``harness.cli``
turns into one line and exit code 2.
"""
from __future__ import annotations

import argparse

from harness.commands import MESH_METAVAR, add_format, add_layout, add_network, deprecated
from harness.commands.answers import emit as _emit
from harness.commands.answers import num as _num
from harness.commands.predict_moe import add_moe
from harness.commands.predict_serve import add_serve, add_speculative
from harness.plan import book
from predictions import collectives, hardware, transformer
from predictions.mesh import parse_mesh

# checked before anything is computed (harness.commands.check_options)
CHECKED = {"chip": "chip"}
WRITES = ("text", "md", "json", "csv")


def _chip_and_model(args):
    if args.chips is None:
        raise ValueError("--num-chips is required: the number of chips")
    return hardware.chip_entry(args.chip), transformer.model(args.model)


def _train(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, tokens = _num("num-chips", args.chips, True), _num("tokens", args.tokens)
    mfu, seq = _num("mfu", args.mfu), _num("seq-len", args.seq_len)
    return _emit(args, book.train(chip, cfg, args.model, chips, tokens, mfu, args.dtype, seq,
                                  _num("batch", args.batch), args.layout, args.spans))


def _precision(args) -> tuple[float, float]:
    return book.precision(args.int8, args.int4, _num("weight-bytes", args.weight_bytes),
                          _num("kv-bytes", args.kv_bytes))


def _decode(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, batch = _num("num-chips", args.chips, True), _num("batch", args.batch, True)
    context = _num("context", args.context)
    wb, kb = _precision(args)
    return _emit(args, book.decode(chip, cfg, args.model, chips, batch, context, wb, kb,
                                   args.dtype))


def _prefill(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, tokens = _num("num-chips", args.chips, True), _num("tokens", args.tokens)
    wb, _ = _precision(args)
    return _emit(args, book.prefill(chip, cfg, args.model, chips, tokens, _num("mfu", args.mfu),
                                    wb, args.dtype, _num("seq-len", args.seq_len)))


def _collective(args) -> int:
    from harness.chip import network

    nbytes = _num("bytes", args.bytes)
    wrap = {"auto": None, "yes": True, "no": False}[args.wraparound]
    decl = network.declared(args)
    system = network.resolve(decl, args.chip, parse_mesh(args.mesh).size) if decl.given else None
    return _emit(args, book.collective(args.kind, nbytes, args.mesh, args.chip, wrap,
                                       args.links, args.hops, system, args.over))


def _matmul(args) -> int:
    return _emit(args, book.matmul(_num("B", args.B), _num("D", args.D), _num("F", args.F),
                                   args.chip, args.dtype, args.weight_dtype))


def _chips(args) -> int:
    return _emit(args, book.chip_table())


def _chip_arg(p) -> None:
    p.add_argument("--chip", required=True, metavar="CHIP",
                   help=f"one of {', '.join(hardware.CHIPS)}")


def _model_args(p) -> None:
    p.add_argument("--model", required=True, metavar="NAME",
                   help=f"one of {', '.join(transformer.MODELS)}")
    _chip_arg(p)
    # required, checked in _chip_and_model: argparse would refuse the old spelling
    p.add_argument("--num-chips", dest="chips", metavar="N", help="number of chips (required)")
    deprecated(p, "--chips", "--num-chips", dest="chips")
    p.add_argument("--dtype", default="bf16", metavar="DTYPE",
                   help="compute dtype (default bf16)")


def _seq_len(p) -> None:
    p.add_argument("--seq-len", metavar="T", help="tokens per sequence: adds attention FLOPs")


def _add_train(sub, common) -> None:
    p = sub.add_parser("train", parents=[common], help="training FLOPs, wall time, step model")
    _model_args(p)
    p.add_argument("--tokens", required=True, metavar="N",
                   help="tokens to train on, e.g. 15e12")
    p.add_argument("--mfu", default="0.4", metavar="FRACTION",
                   help="model FLOPs utilisation (default 0.4)")
    p.add_argument("--batch", metavar="N",
                   help="global batch in tokens: adds the step model and memory")
    add_layout(p, default="fsdp", what="the layout the step model prices (its book model)")
    deprecated(p, "--strategy", "--layout", dest="layout")
    p.add_argument("--spans", default="1", metavar="M_X[xM_Y]",
                   help="physical axes each mesh axis spans (M_X, or M_XxM_Y with a model "
                        "axis; training.md; harness plan's spans column) (default 1)")
    deprecated(p, "--axes", "--spans", dest="spans")
    _seq_len(p)
    p.set_defaults(_run=_train)


def _add_serving(sub, common) -> None:
    for name, run, helptext in (("decode", _decode, "one decode step"),
                                ("prefill", _prefill, "prefill time")):
        p = sub.add_parser(name, parents=[common], help=helptext)
        _model_args(p)
        p.add_argument("--int8", action="store_true", help="int8 weights and KV cache")
        p.add_argument("--int4", action="store_true", help="int4 weights, int8 KV cache")
        p.add_argument("--weight-bytes", metavar="BYTES",
                       help="bytes per parameter (overrides --int8/--int4)")
        p.add_argument("--kv-bytes", metavar="BYTES", help="bytes per KV element")
        p.set_defaults(_run=run)
    decode = sub.choices["decode"]
    decode.add_argument("--batch", required=True, metavar="N",
                        help="global batch: concurrent sequences, one token each per step")
    decode.add_argument("--context", required=True, metavar="N",
                        help="cached tokens per sequence")
    prefill = sub.choices["prefill"]
    prefill.add_argument("--tokens", required=True, metavar="N", help="prompt tokens")
    prefill.add_argument("--mfu", default="1.0", metavar="FRACTION",
                         help="FLOPs utilisation (default 1.0)")
    _seq_len(prefill)


def _add_collective(sub, common) -> None:
    p = sub.add_parser("collective", parents=[common], help="time of one collective")
    p.add_argument("kind", choices=collectives.KINDS + ("ppermute",))
    p.add_argument("--bytes", required=True, metavar="BYTES",
                   help="V: bytes per device (see sharding.md)")
    p.add_argument("--mesh", default="1", metavar=MESH_METAVAR,
                   help="the mesh axes the collective runs over, by name and size (X=4,Y=4) or "
                        "a shape (4x4) (default 1)")
    deprecated(p, "--axes", "--mesh", dest="mesh")
    p.add_argument("--over", metavar="NAME[,NAME]",
                   help="the axes of --mesh the collective runs over (default all): with "
                        "--system the mesh is the whole job's, device ids row-major")
    _chip_arg(p)
    add_network(p)
    p.add_argument("--wraparound", choices=("auto", "yes", "no"), default="auto",
                   help="whether the axes wrap around (default auto: the chip's topology)")
    p.add_argument("--links", type=int, default=1, metavar="N", help="ppermute: links used")
    p.add_argument("--hops", type=int, default=1, metavar="N",
                   help="ppermute: hops to the destination")
    p.set_defaults(_run=_collective)


def _add_matmul(sub, common) -> None:
    p = sub.add_parser("matmul", parents=[common], help="roofline of X[B,D] . W[D,F]")
    for letter in "BDF":
        p.add_argument(f"--{letter}", required=True, metavar="N",
                       help=f"{letter} of X[B,D] . W[D,F]")
    _chip_arg(p)
    p.add_argument("--dtype", default="bf16", metavar="DTYPE",
                   help="compute dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, metavar="DTYPE",
                   help="the weights' dtype (default --dtype)")
    p.set_defaults(_run=_matmul)


def _pipeline(args) -> int:
    from predictions import pipeline

    given = parse_mesh(args.mesh)
    if given.positional or "stage" not in given.shape:
        raise ValueError(f"--mesh {args.mesh}: name the axes by role, a stage axis among them "
                         f"(stage=16,model=8,data=128; roles stage, data, fsdp, model)")
    shape, cfg = given.shape, transformer.model(args.model)
    X = shape.get("data", 1) * shape.get("fsdp", 1)
    rows, data = pipeline.answer(args.chip, cfg.L, cfg.D, cfg.F, _num("batch", args.batch),
                                 shape["stage"], _num("microbatches", args.microbatches, True),
                                 X, shape.get("model", 1), _num("repeats", args.repeats, True))
    title = (f"{args.model} pipelined over {args.mesh} on {data['chip']}: {data['M']} "
             f"microbatches of {data['B_pipeline'] / data['M']:,.0f} tokens")
    return _emit(args, book.Answer(title, rows, data))


def _add_pipeline(sub, common) -> None:
    p = sub.add_parser("pipeline", parents=[common],
                       help="pipeline bubble, stage transfers, DP/ZeRO thresholds (gpus.md)")
    p.add_argument("--model", required=True, metavar="NAME",
                   help=f"one of {', '.join(transformer.MODELS)}")
    _chip_arg(p)
    p.add_argument("--mesh", required=True, metavar=MESH_METAVAR,
                   help="the job's mesh by role: stage=S, and data/fsdp=X, model=Y")
    p.add_argument("--batch", required=True, metavar="N", help="global batch in tokens")
    p.add_argument("--microbatches", required=True, metavar="N", help="N_MB, M")
    p.add_argument("--repeats", default="1", metavar="N",
                   help="layer chunks per stage, v (circular, interleaved; default 1)")
    p.set_defaults(_run=_pipeline)


def _add_chips(sub, common) -> None:
    sub.add_parser("chips", parents=[common], help="list the chip registry").set_defaults(
        _run=_chips)


# the questions, in --help's order: each adds its parser (its options and its answer)
QUESTIONS = (_add_train, _add_serving, add_serve, add_speculative, _add_collective, _add_matmul,
             _add_pipeline, add_moe, _add_chips)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_format(common, WRITES)
    deprecated(common, "--json", "--format json", dest="format", action="store_const",
               const="json")
    sub = parser.add_subparsers(dest="what", metavar="QUESTION", required=True)
    for add in QUESTIONS:
        add(sub, common)


def main(args: argparse.Namespace) -> int:
    return args._run(args)
