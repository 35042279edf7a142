"""Pipeline parallelism in numbers: the bubble, what a stage holds, what crosses between stages
(`training.md` and `gpus.md` on pipelining, reference §6.2; the schedules' papers below).

Letters: S stages, M microbatches, v layer repeats per stage (circular / interleaved), B batch
tokens, D model dim, F MLP width, L layers, W bytes/s of the link between stages, X the
data-parallel (or FSDP) degree, α = C/W the critical intensity (roofline.md).

Stdlib only, like the rest of predictions/.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from predictions.costs import positive
from predictions.hardware import Chip, chip_entry


def _whole(name: str, value: float) -> int:
    if value != int(value) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value}")
    return int(value)


# schedule -> (S, M, v) -> the share of a step's stage-time in the bubble (idle or busy with
# invalid microbatches). F : B(dx) : W(dW) = 1 : 1 : 1 in time (transformers.md: the backward's
# 4 FLOPs per weight per token are 2 for dx and 2 for dW, reference §5.1).
BUBBLE: dict[str, Callable[[int, int, int], float]] = {
    # GPipe (Huang et al. 2019) and 1F1B (PipeDream-flush, Narayanan et al. 2021): S − 1 of
    # M + S − 1 slots of every stage are idle, in the forward and in the backward
    "gpipe": lambda S, M, v: (S - 1) / (M + S - 1),
    "1f1b": lambda S, M, v: (S - 1) / (M + S - 1),
    # interleaved 1F1B (Narayanan et al. 2021 §2.2) and MaxText's circular pipeline: v chunks a
    # stage, the fill and drain last 1/v as long: (S − 1)/v of M stage-times of work
    "circular": lambda S, M, v: (S - 1) / (v * M + S - 1),
    "interleaved": lambda S, M, v: (S - 1) / (v * M + S - 1),
    # zero bubble ZB-H1 (Qi et al. 2024): dW deferred into the drain, the bubble
    # (S − 1)(F + B − W) = (S − 1)·1 of 3 units per microbatch
    "zb-h1": lambda S, M, v: (S - 1) / (3 * M + S - 1),
    # ZB-H2, ZB-V, DeepSeek's DualPipe (gpus.md: "bubble-free, overlapping forward, dX and
    # dW"): the dx and dW matmuls fill the bubble, at more memory (``HELD``)
    "zb-h2": lambda S, M, v: 0.0,
}

# schedule -> (S, M) -> microbatches whose activations the first stage holds at its peak:
# GPipe M (every forward before any backward), 1F1B min(S, M) (S − s at stage s, Narayanan et
# al. 2021), circular M (GPipe's order, each of the v chunks 1/v of the stage), interleaved
# S(1 + (S − 1)/(S·v)) ≈ S, ZB-H1 S, ZB-H2 2S − 1 (Qi et al. 2024)
HELD: dict[str, Callable[[int, int, int], float]] = {
    "gpipe": lambda S, M, v: M,
    "1f1b": lambda S, M, v: min(S, M),
    "circular": lambda S, M, v: M,
    "interleaved": lambda S, M, v: min(M, S + (S - 1) / v),
    "zb-h1": lambda S, M, v: min(S, M),
    "zb-h2": lambda S, M, v: min(2 * S - 1, M),
}
SCHEDULES = tuple(BUBBLE)
RUN = ("gpipe", "1f1b", "circular")   # the ones llama_train runs; the others are predicted


def _check(schedule: str, S: float, M: float, v: float) -> tuple[int, int, int]:
    if schedule not in BUBBLE:
        raise ValueError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    return _whole("stages", S), _whole("microbatches", M), _whole("repeats", v)


def bubble(schedule: str, S: float, M: float, v: float = 1) -> float:
    """Share of the step's stage-time in the bubble (``BUBBLE``)."""
    args = _check(schedule, S, M, v)
    return BUBBLE[schedule](*args)


def step_time(work_s: float, schedule: str, S: float, M: float, v: float = 1) -> float:
    """A stage's busy time ``work_s`` stretched by the bubble: work / (1 − bubble)."""
    return positive("work_s", work_s) / (1.0 - bubble(schedule, S, M, v))


def held_microbatches(schedule: str, S: float, M: float, v: float = 1) -> float:
    """Microbatches of activations the first stage holds at its peak (``HELD``)."""
    args = _check(schedule, S, M, v)
    return HELD[schedule](*args)


def activation_bytes(schedule: str, S: float, M: float, per_microbatch_bytes: float,
                     v: float = 1) -> float:
    """Activation bytes a stage holds at its peak: its held microbatches x one microbatch's
    activations over the stage's L/S layers (``per_microbatch_bytes``, from the memory model:
    2·D·(B/M)·n_ckpt·L/S with checkpoints, applied-training.md, reference §6.3)."""
    return held_microbatches(schedule, S, M, v) * positive("per_microbatch_bytes",
                                                           per_microbatch_bytes)


def hop_s(B: float, D: float, W: float, M: float, bytes_per: float = 2) -> float:
    """One stage-to-stage transfer of one microbatch's activations: 2BD/(W·N_MB) for bf16
    (gpus.md, reference §6.2; ``bytes_per`` the activation dtype's size)."""
    return bytes_per * positive("B", B) * positive("D", D) / (positive("W", W)
                                                             * _whole("microbatches", M))


def stage_comm_s(B: float, D: float, W: float, M: float, S: float,
                 bytes_per: float = 2) -> float:
    """The forward's transfers along the pipeline, one hop per tick of the fill, the steady
    state and the drain: 2BD/(W·N_MB)·(N_MB + N_stages − 2) (gpus.md, reference §6.2); the
    backward sends the gradients back the same way."""
    return hop_s(B, D, W, M, bytes_per) * (_whole("microbatches", M) + _whole("stages", S) - 2)


def per_layer_comm_s(B: float, D: float, W: float, L: float, bytes_per: float = 2) -> float:
    """The pipeline's transfers spread over the layers: ≈ 1.5·2BD/(W·N_layers) (gpus.md,
    "from a communication standpoint, pipelining is basically free")."""
    return 1.5 * bytes_per * positive("B", B) * positive("D", D) / (positive("W", W)
                                                                   * positive("L", L))


def outer_axis_gain(S: float, Y: float = 1, per_node: float = 8) -> float:
    """How much wider the data-parallel reduction over the outer network runs when each
    model-parallel group (S stages x Y-way TP) spans S·Y/per_node nodes: each node's egress
    carries 1/gain of it (gpus.md: LLaMA-3's 16-way PP "reduces the cost of the data parallel
    AllReduce by 16x"; Quiz 5 Q2: 8-way PP x 8-way TP takes 400 GB/s to 3200 GB/s). 1 within a
    node."""
    return max(1.0, _whole("stages", S) * positive("Y", Y) / positive("per_node", per_node))


def dp_min_tokens(C: float, W: float, gain: float = 1, microbatches: float = 1) -> float:
    """Tokens per chip for DP/ZeRO-1 to stay compute-bound: B/X > C/W (gpus.md, training.md
    §6.2), W widened by the outer-axis ``gain``; ZeRO-3 inside a pipeline gathers the weights
    for every microbatch with only B/N_MB tokens to amortize them, so ``microbatches`` times
    more (gpus.md: "ZeRO-3 sharding in particular works badly")."""
    return (positive("C", C) / (positive("W", W) * positive("gain", gain))
            * _whole("microbatches", microbatches))


def zero3_penalty_bytes(D: float, F: float, L: float, S: float, M: float,
                        Y: float = 1) -> float:
    """Extra bytes per chip per step when a stage's weights are FSDP (ZeRO-3) sharded: they
    are regathered for each of the M microbatches (gpus.md), (M − 1) x the stage's
    12·D·F·L/(S·Y) a step (4DF/Y forward + 8DF/Y backward per layer beside Y-way TP,
    training.md §6.1) more than gathering once; ZeRO-1 (weights whole per stage) pays none."""
    per_pass = (12 * positive("D", D) * positive("F", F) * positive("L", L)
                / (_whole("stages", S) * positive("Y", Y)))
    return (_whole("microbatches", M) - 1) * per_pass


def link_bytes_per_s(chip: Chip | str, over: str = "node") -> float:
    """The bandwidth between two stages: a GPU's scale-out share (node egress / GPUs per node,
    gpus.md: 400e9 / 8 = 50e9 on H100) or NVLink ("nvlink"); a TPU's ICI link one way
    ("ici", tpus.md) or DCN ("dcn"). ValueError when the chip has no such figure."""
    c = chip_entry(chip)
    table = {
        "node": (c.node_bytes_per_s / c.chips_per_node) if c.node_bytes_per_s else None,
        "nvlink": c.ici_bytes_per_s if c.kind == "gpu" else None,
        "ici": c.ici_bytes_per_s if c.kind == "tpu" else None,
        "dcn": c.dcn_bytes_per_s,
    }
    if over not in table:
        raise ValueError(f"unknown link {over!r}; valid: {', '.join(table)}")
    if not table[over]:
        valid = ", ".join(k for k, w in table.items() if w)
        raise ValueError(f"{c.name} has no {over} bandwidth in the book; valid: {valid}")
    return table[over]


def stage_memory(P: float, L: float, D: float, schedule: str, S: float, M: float, X: float,
                 Y: float, tokens: float, v: float = 1, n_ckpt: float = 1,
                 zero1: bool = True, act_bytes: float = 2) -> dict[str, float]:
    """Bytes per chip of a pipelined layout (S stages x X replicas x Y-way TP) training on
    ``tokens`` a step: each stage holds L/S of the layers' P (training.md, reference §6.3:
    bf16 weights and gradients, 2 + 2 bytes/param, over Y; fp32 AdamW moments, 8 bytes/param,
    also over the X replicas with ZeRO-1, gpus.md's LLaMA-3 setup), and its schedule's held
    microbatches of checkpoints, each 2·D·(B/(X·M))·n_ckpt·L/S bytes over Y
    (applied-training.md's 2·D·B·n_ckpt·L, reference §6.3; ``activation_bytes``)."""
    S, X = _whole("stages", S), _whole("X", X)
    per_stage = positive("P", P) / S / positive("Y", Y)
    per_microbatch = (act_bytes * positive("D", D) * positive("tokens", tokens)
                      / (X * _whole("microbatches", M)) * n_ckpt * positive("L", L) / S / Y)
    return {"weights": 2 * per_stage, "gradients": 2 * per_stage,
            "optimizer": 8 * per_stage / (X if zero1 else 1),
            "activations": activation_bytes(schedule, S, M, per_microbatch, v)}


@dataclass(frozen=True)
class PipelineStep:
    """A pipelined step (seconds): the stage's work stretched by the bubble, the part of the
    data-parallel gradient reduction left exposed, and the stage hops of the fill and drain."""

    bubble: float
    work_s: float
    busy_s: float
    bubble_s: float
    dp_s: float
    dp_exposed_s: float
    hops_s: float
    step_s: float


def pipelined_step(work_s: float, dp_s: float, hop: float, schedule: str, S: float, M: float,
                   v: float = 1, regather_s: float = 0.0) -> PipelineStep:
    """The step of one pipeline replica whose slowest stage does ``work_s`` of compute (and TP)
    a step: busy = work, or M·max(work/M, regather) where ZeRO-3 gathers the stage's weights
    again for each microbatch (``regather_s`` each, overlapping it; gpus.md); stretched by the
    bubble, busy/(1 − bubble); plus the gradient reduction over the replicas (``dp_s``), which
    cannot start before the last microbatch has left the stage (gpus.md, reference §6.2), so
    only the last microbatch's backward (2/3 of its work, transformers.md's 4 of 6 FLOPs per
    weight per token) hides it; plus the fill's and the drain's 2(S − 1) ``hop``s, the only
    stage transfers on the critical path (the steady state's overlap the work)."""
    share = bubble(schedule, S, M, v)
    busy = _whole("microbatches", M) * max(positive("work_s", work_s) / M, regather_s)
    stretched = busy / (1.0 - share)
    exposed = max(0.0, dp_s - 2.0 / 3.0 * work_s / M)
    hops = 2 * (_whole("stages", S) - 1) * hop
    return PipelineStep(share, work_s, busy, stretched - busy, dp_s, exposed, hops,
                        stretched + exposed + hops)


def _t(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def answer(chip: Chip | str, L: float, D: float, F: float, batch: float, S: int, M: int,
           X: int = 1, Y: int = 1, v: int = 1) -> tuple[list[tuple[str, str, str]], dict]:
    """The book's pipelining answers for a model (L, D, F) trained on a ``batch`` of tokens over
    S stages x X data-parallel replicas x Y-way TP, M microbatches, v repeats: rows
    (quantity, value, formula with its section) and the same figures as data. GPUs: stages
    talk over the node's scale-out share (gpus.md), DP reduces over node egress; TPUs: ICI."""
    c = chip_entry(chip)
    gpu = c.kind == "gpu"
    W_stage = link_bytes_per_s(c, "node" if gpu else "ici")
    W_dp = c.node_bytes_per_s if gpu and c.node_bytes_per_s else c.axis_bytes_per_s
    B = positive("batch", batch) / _whole("X", X)      # tokens through one pipeline
    N = _whole("stages", S) * X * _whole("Y", Y)
    gain = outer_axis_gain(S, Y, c.chips_per_node) if gpu else 1.0
    C = c.flops_per_s("bf16")
    rows, data = [], {"chip": c.name, "S": S, "M": M, "X": X, "Y": Y, "v": v, "N": N,
                      "B_pipeline": B, "bubble": {}, "held": {}}
    for name in SCHEDULES:
        share, held = bubble(name, S, M, v), held_microbatches(name, S, M, v)
        data["bubble"][name], data["held"][name] = share, held
        rows.append((f"bubble {name}", f"{share:.1%} (first stage holds {held:g} "
                     f"microbatches)", FORMULAS[name]))
    figures = {
        "hop_s": (hop_s(B, D, W_stage, M), "2BD/(W·N_MB) per hop (gpus.md)"),
        "stage_comm_s": (stage_comm_s(B, D, W_stage, M, S),
                         "2BD/(W·N_MB)·(N_MB + N_stages − 2) (gpus.md)"),
        "per_layer_comm_s": (per_layer_comm_s(B, D, W_stage, L), "1.5·2BD/(W·N_layers) (gpus.md)"),
    }
    for key, (value, formula) in figures.items():
        data[key] = value
        rows.append((key.removesuffix("_s").replace("_", " "), _t(value), formula))
    has = batch / N
    without, with_pp = dp_min_tokens(C, W_dp), dp_min_tokens(C, W_dp, gain)
    zero3 = dp_min_tokens(C, W_dp, gain, M)
    data.update(outer_axis_gain=gain, tokens_per_chip=has, dp_min_tokens_no_pp=without,
                dp_min_tokens=with_pp, zero3_min_tokens=zero3,
                zero3_extra_bytes=zero3_penalty_bytes(D, F, L, S, M, Y))
    ok = lambda need: "compute-bound" if has > need else "comms-bound"  # noqa: E731
    rows += [
        ("outer-axis gain", f"{gain:g}x", "S·Y/GPUs per node: the DP reduction runs that much "
         "wider (gpus.md, LLaMA-3 and Quiz 5 Q2)" if gpu else "1 within a TPU slice"),
        ("tokens per chip", f"{has:,.0f}", "B/N"),
        ("DP/ZeRO-1 needs", f"{with_pp:,.0f} tokens per chip ({ok(with_pp)}; "
         f"{without:,.0f} without the pipeline)", "B/N > C/(gain·W) (gpus.md, training.md §6.2)"),
        ("ZeRO-3 needs", f"{zero3:,.0f} tokens per chip ({ok(zero3)})",
         "x N_MB: weights gathered per microbatch (gpus.md)"),
        ("ZeRO-3 extra bytes", f"{data['zero3_extra_bytes'] / 1e9:,.3g} GB per chip a step",
         "(N_MB − 1)·12·D·F·L/(S·Y) (training.md §6.1)"),
    ]
    return rows, data


FORMULAS: dict[str, str] = {
    "gpipe": "(S − 1)/(M + S − 1) (Huang et al. 2019)",
    "1f1b": "(S − 1)/(M + S − 1) (Narayanan et al. 2021)",
    "circular": "(S − 1)/(v·M + S − 1) (MaxText's circular pipeline)",
    "interleaved": "(S − 1)/(v·M + S − 1) (Narayanan et al. 2021 §2.2)",
    "zb-h1": "(S − 1)/(3M + S − 1): dW fills the drain (Qi et al. 2024)",
    "zb-h2": "0: dx and dW fill the bubble (Qi et al. 2024; gpus.md, DeepSeek-V3)",
}
