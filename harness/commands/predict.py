"""``harness predict``: the book's first-principles answers from the command line.

    harness predict train --model llama3-70b --chip tpu-v5p --chips 8960 --tokens 15e12 --mfu 0.4
    harness predict decode --model llama3-70b --chip tpu-v5e --chips 8 --batch 32 --context 8192 \
        --int8
    harness predict prefill --model llama3-70b --chip tpu-v5e --chips 16 --tokens 8192 --mfu 0.4
    harness predict collective all-gather --bytes 34e6 --axes 4 --chip tpu-v5e
    harness predict matmul --B 1024 --D 8192 --F 28672 --chip tpu-v5e
    harness predict chips

Each prints the answer, the bound and the formula terms (``--json`` for JSON). Bad input raises
ValueError/KeyError, which ``harness.cli`` turns into one line and exit code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from rich.console import Console
from rich.table import Table

from harness.units import fmt_seconds, fmt_si
from predictions import collectives, hardware, inference, roofline, training, transformer


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


COLUMNS = ("quantity", "value", "formula (book chapter)")


def _emit(args, title: str, rows: list[tuple[str, ...]], data: dict,
          columns: tuple[str, ...] = COLUMNS) -> int:
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
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
    P = transformer.param_count(cfg)
    flops = transformer.train_flops(cfg, tokens, seq)
    t = training.train_time(cfg, tokens, chip, chips, mfu, args.dtype, seq)
    rows = [("params P", fmt_si(P), "L(3DF+2D(N+K)H+2D)+D+2DV (transformers.md)"),
            ("train FLOPs", fmt_si(flops, "FLOP"), "6*P*tokens (+12*T*S*N*H*L) (transformers.md)"),
            ("wall time", fmt_seconds(t), "FLOPs/(chips*C*MFU) (training.md)"),
            ("bound", "compute (at the given MFU)", "")]
    data = {"model": args.model, "chip": chip.name, "chips": chips, "tokens": tokens, "mfu": mfu,
            "params": P, "flops": flops, "seconds": t, "bound": "compute"}
    batch = _num("batch", args.batch)
    if batch is not None:
        axes = collectives.parse_axes(args.axes)
        axes = axes[0] if len(axes) == 1 else axes
        step = training.step_time(cfg, batch, chip, chips, args.strategy, axes=axes, mfu=mfu,
                                  dtype=args.dtype, seq_len=seq)
        mem = training.memory_per_chip(cfg, batch, chips, chip=chip)
        rows += [("strategy X x Y", f"{args.strategy} {step.X} x {step.Y}", "training.md"),
                 ("tokens per chip", fmt_si(step.tokens_per_chip), "B/(X*Y)"),
                 ("step T_math", fmt_seconds(step.t_math_s), "6*P*B/(N*C*MFU) (training.md)"),
                 ("step T_fsdp", fmt_seconds(step.t_fsdp_s), "L*3*2*P_layer/(Y*W_ici*M_X)"),
                 ("step T_tp", fmt_seconds(step.t_tp_s), "L*3*2*2*B*D/(X*W_ici*M_Y)"),
                 ("step time", fmt_seconds(step.t_step_s),
                  "sum over passes of max(T_math, T_comms)"),
                 ("step bound", step.bound, ""),
                 ("memory per chip", fmt_si(mem.total_bytes, "B"),
                  f"10*P/N + 2*D*B*4*L/N (applied-training.md); fits: {mem.fits}")]
        data.update(step=dataclasses.asdict(step),
                    memory={**dataclasses.asdict(mem), "fits": mem.fits})
    return _emit(args, f"train {args.model} on {chips} x {chip.name}", rows, data)


def _precision(args) -> tuple[float, float]:
    default = 0.5 if args.int4 else 1 if args.int8 else 2
    wb = _num("weight-bytes", args.weight_bytes)
    kb = _num("kv-bytes", args.kv_bytes)
    return (default if wb is None else wb,
            (1 if args.int8 or args.int4 else 2) if kb is None else kb)


def _decode(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, batch = _num("chips", args.chips, True), _num("batch", args.batch, True)
    context = _num("context", args.context)
    wb, kb = _precision(args)
    s = inference.decode_step(cfg, chip, chips, batch, context, wb, kb, args.dtype)
    crit = inference.critical_batch(chip, wb, args.dtype)
    mb = inference.max_batch(cfg, chip, chips, context, wb, kb)
    rows = [("param bytes", fmt_si(s.param_bytes, "B"), f"P*{wb}"),
            ("KV bytes", fmt_si(s.kv_bytes, "B"), f"B*S*2*L*K*H*{kb} (transformers.md)"),
            ("kv time", fmt_seconds(s.kv_time_s), "KV bytes/(chips*W_hbm) (inference.md)"),
            ("param time", fmt_seconds(s.param_time_s), "param bytes/(chips*W_hbm)"),
            ("flops time", fmt_seconds(s.flops_time_s), "2*P*B/(chips*C)"),
            ("step time", fmt_seconds(s.step_s), "kv + max(flops, param) (inference.md)"),
            ("bound", s.bound, f"critical batch {crit:.0f} = C*s_w/(2*W_hbm)"),
            ("throughput", f"{fmt_si(s.tokens_per_s, 'tok/s')} "
                           f"({fmt_si(s.tokens_per_s_per_chip)}/chip)", "B/step"),
            ("max batch", str(mb), "(chips*HBM - param bytes)/(S*KV per token)")]
    data = {"model": args.model, "chip": chip.name, **dataclasses.asdict(s),
            "tokens_per_s": s.tokens_per_s, "critical_batch": crit, "max_batch": mb}
    return _emit(args, f"decode {args.model} on {chips} x {chip.name}", rows, data)


def _prefill(args) -> int:
    chip, cfg = _chip_and_model(args)
    chips, tokens = _num("chips", args.chips, True), _num("tokens", args.tokens)
    wb, _ = _precision(args)
    p = inference.prefill(cfg, chip, chips, tokens, _num("mfu", args.mfu), wb, args.dtype,
                          _num("seq-len", args.seq_len))
    rows = [("FLOPs", fmt_si(p.flops, "FLOP"), "2*P*tokens (inference.md)"),
            ("flops time", fmt_seconds(p.flops_time_s), "FLOPs/(chips*C*MFU)"),
            ("param time", fmt_seconds(p.param_time_s), "param bytes/(chips*W_hbm)"),
            ("prefill time", fmt_seconds(p.seconds), "max of the two"),
            ("bound", p.bound, "")]
    data = {"model": args.model, "chip": chip.name, "chips": chips, **dataclasses.asdict(p)}
    return _emit(args, f"prefill {args.model} on {chips} x {chip.name}", rows, data)


def _collective(args) -> int:
    nbytes = _num("bytes", args.bytes)
    if args.kind == "ppermute":
        e = collectives.ppermute_terms(nbytes, args.chip, args.links, args.hops)
    else:
        wrap = {"auto": None, "yes": True, "no": False}[args.wraparound]
        e = collectives.estimate(args.kind, nbytes, args.axes, args.chip, wrap)
    rows = [("V (bytes)", fmt_si(e.nbytes, "B"), "per-device convention of sharding.md"),
            ("axes", "x".join(map(str, e.axes)) or "-", f"wraparound: {e.wraps or '-'}"),
            ("bandwidth term", fmt_seconds(e.t_bandwidth_s), e.formula),
            ("latency term", fmt_seconds(e.t_latency_s), "T_min * hops (sharding.md)"),
            ("time", fmt_seconds(e.seconds), "max of the two"),
            ("bound", e.bound, "")]
    data = {**dataclasses.asdict(e), "seconds": e.seconds, "bound": e.bound}
    return _emit(args, f"{args.kind} on {e.chip}", rows, data)


def _matmul(args) -> int:
    m = roofline.matmul(_num("B", args.B), _num("D", args.D), _num("F", args.F), args.chip,
                        args.dtype, args.weight_dtype)
    rows = [("FLOPs", fmt_si(m.flops, "FLOP"), "2BDF (roofline.md)"),
            ("bytes", fmt_si(m.bytes, "B"), "s_x*BD + s_w*DF + s_x*BF"),
            ("intensity", f"{m.intensity:.4g}", f"critical {m.critical_intensity:.4g} = C/W_hbm"),
            ("T_math", fmt_seconds(m.t_compute_s), "FLOPs/C"),
            ("T_memory", fmt_seconds(m.t_memory_s), "bytes/W_hbm"),
            ("time", f"{fmt_seconds(m.t_lower_s)} .. {fmt_seconds(m.t_upper_s)}", "max .. sum"),
            ("bound", m.bound, "")]
    return _emit(args, f"matmul on {hardware.chip_entry(args.chip).name}", rows,
                 dataclasses.asdict(m))


def _chips(args) -> int:
    rows, data = [], {}
    for name, c in hardware.CHIPS.items():
        ici = roofline.critical_intensity(c, "bf16", "ici")
        rows.append((name, fmt_si(c.flops_per_s("bf16"), "FLOP/s"), fmt_si(c.hbm_bytes, "B"),
                     fmt_si(c.hbm_bytes_per_s, "B/s"),
                     f"{fmt_si(c.ici_bytes_per_s, 'B/s')} "
                     + (f"x {c.ici_links} links" if c.kind == "tpu" else
                        f"egress ({c.ici_links} links)" if c.kind == "gpu" else "ring"),
                     "x".join(map(str, c.max_slice)) or "-",
                     f"{roofline.critical_intensity(c):.0f}", f"{ici:.0f}"))
        data[name] = dataclasses.asdict(c)
    return _emit(args, "chips (tpus.md, gpus.md; cpu is a placeholder for `harness calibrate`)",
                 rows, data, ("chip", "bf16 peak", "HBM", "HBM BW", "ICI one-way / NVLink egress",
                              "max slice", "C/W_hbm", "C/W_ici"))


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
