"""Workload-level predictions from the book, next to the per-op sum: one entry per workload.

Each entry maps a workload's config and mesh to ``Analytic(model_flops, analytic_s, formula)``:
the step's useful FLOPs over all devices (for MFU) and the book's step-time estimate on a chip.
Workloads without an entry get neither figure.

MFU counts the work the hardware must do (as MaxText does): 6 (training) or 2 (inference) x
the parameters that take part in matmuls x tokens, plus attention. The input embedding is a
gather and the norms are elementwise, so neither counts; the output projection does. The book's
6 x all parameters x tokens (``transformer.train_flops``) stays for its planning answers in
``predictions/`` and is reported beside it (``book_flops``), so a program that does the model's
work shows HFU >= MFU.

``Analytic.parts`` splits the book's step into the parts ``harness.hlo.chips.book_gap`` sets the
per-op sum against (``PARTS``): the matmul FLOPs at peak, the collectives by the sharding
chapter's formulas, the memory traffic the book counts (weights and KV reads in inference; none in
training), and the overlap the book assumes (its step is a max over terms, not their sum).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from predictions import collectives, hardware, inference, training, transformer

MATMUL, COLLECTIVE, MEMORY, OVERLAP = PARTS = ("matmul", "collective", "memory", "overlap")


@dataclass(frozen=True)
class BookPart:
    """One part of the book's step: seconds, and the work behind them per device (FLOPs for
    matmul, bytes for collective and memory; None for overlap)."""

    seconds: float
    work: float | None
    formula: str


@dataclass(frozen=True)
class Analytic:
    model_flops: float | None
    analytic_s: float | None
    formula: str
    flops_formula: str = ""             # how model_flops is counted
    book_flops: float | None = None     # the book's 6P (or 2P) count, for comparison
    parts: dict = field(default_factory=dict)  # PARTS -> BookPart (harness.hlo.chips.book_gap)


# MaxText's MFU numerator: parameters that take part in matmuls (module docstring)
MFU_FORMULA = {
    "train": "6*P_matmul*tokens + 12*B*T*T*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV "
             "(MaxText: no input embedding, no norms)",
    "prefill": "2*P_matmul*tokens + 4*B*T*T*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV",
    "decode": "2*P_matmul*B + 4*B*S*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV",
}


def matmul_params(model: transformer.Config) -> int:
    """Parameters that take part in matmuls: every layer's MLP and attention projections and
    the output projection (D x V, shared with the input embedding when tied)."""
    return model.L * (transformer.mlp_params(model) + transformer.attention_params(model)) \
        + model.D * model.V


def _overlap(total_s: float, parts: dict[str, BookPart], why: str) -> dict[str, BookPart]:
    """Add the overlap part: the book's step minus the sum of its terms (<= 0)."""
    rest = sum(p.seconds for p in parts.values())
    return {**parts, OVERLAP: BookPart(total_s - rest, None, why)}


def _model(cfg) -> transformer.Config:
    return transformer.Config(L=cfg.L, D=cfg.D, F=cfg.F, N=cfg.N, K=cfg.K, H=cfg.H, V=cfg.V)


def _mesh_sizes(mesh) -> tuple[int, ...]:
    return tuple(int(n) for n in dict(mesh.shape).values())


def _dtype(cfg, field: str = "dtype") -> str:
    """The book's dtype name for a workload dtype field (bf16 / fp32)."""
    return hardware.DTYPE_ALIASES.get(str(getattr(cfg, field, "bfloat16")).lower(), "bf16")


def _matmul(cfg, mesh, chip) -> Analytic:
    # roofline.md: 2BDF FLOPs for X[B, D] @ Y[D, F], over all devices
    return Analytic(2.0 * cfg.B * cfg.D * cfg.F, None, "2*B*D*F (roofline.md)")


def _collective(cfg, mesh, chip) -> Analytic:
    axes = collectives.axis_sizes(cfg.axes, dict(mesh.shape))
    n = math.prod(axes)
    kind = collectives.KIND_OF_WORKLOAD[cfg.kind]
    if kind == "collective-permute":
        # sharding.md: a point-to-point shift moves the whole buffer over one link
        return Analytic(0.0, collectives.ppermute(cfg.nbytes, chip), "bytes/W_1 (sharding.md)")
    t = collectives.estimate(kind, collectives.V_OF_INPUT[kind](cfg.nbytes, n), axes, chip)
    return Analytic(0.0, t.seconds, f"{t.formula} (sharding.md)")


# A dp_tp mesh moves DP's gradient bytes over X and TP's activations over Y: costed as the
# book's FSDP+TP model on the same X and Y (training.md).
_STRATEGY = {"dp": "dp", "fsdp": "fsdp", "tp": "tp", "fsdp_tp": "fsdp_tp", "dp_tp": "fsdp_tp"}


def _train(cfg, mesh, chip) -> Analytic:
    model, sizes = _model(cfg), _mesh_sizes(mesh)
    n = math.prod(sizes)
    tokens = cfg.B * cfg.T
    strategy = _STRATEGY[cfg.parallelism]
    X, Y = {"dp": (n, 1), "fsdp": (n, 1), "tp": (1, n)}.get(
        strategy, (sizes[0], n // sizes[0]))
    st = training.step_time(model, tokens, chip, n, strategy=strategy, X=X, Y=Y,
                            dtype=_dtype(cfg, "param_dtype"), seq_len=cfg.T)
    attention = transformer.attention_flops(model, tokens, cfg.T, training=True)
    book_flops = transformer.train_flops(model, tokens, seq_len=cfg.T)
    # training.md: comm time = bytes / W per axis (M_X = M_Y = 1 here), so bytes = T_comms * W
    W = hardware.chip_entry(chip).axis_bytes_per_s
    parts = {MATMUL: BookPart(st.t_math_s, book_flops / n, "6*P*tokens (+attention) / (N*C)"),
             COLLECTIVE: BookPart(st.t_comms_s, st.t_comms_s * W,
                                  "FSDP AllGather/ReduceScatter of weights + TP AllGather/"
                                  "ReduceScatter of activations, bytes / W_ici"),
             MEMORY: BookPart(0.0, 0.0, "not in the book's training model")}
    parts = _overlap(st.t_step_s, parts, "per layer max(T_math, T_comms), not the sum")
    # transformers.md: 6 * P * tokens plus attention for training (P: matmul parameters)
    return Analytic(6.0 * matmul_params(model) * tokens + attention, st.t_step_s,
                    f"training.md {strategy} step, X={X} Y={Y}", MFU_FORMULA["train"],
                    book_flops, parts)


def _prefill(cfg, mesh, chip) -> Analytic:
    model, n = _model(cfg), math.prod(_mesh_sizes(mesh))
    tokens = cfg.B * cfg.T
    est = inference.prefill(model, chip, n, tokens, weight_bytes=1 if cfg.int8_weights else 2,
                            dtype=_dtype(cfg), seq_len=cfg.T)
    attention = transformer.attention_flops(model, tokens, cfg.T)
    c = hardware.chip_entry(chip)
    parts = {MATMUL: BookPart(est.flops_time_s, est.flops / n,
                              "2*P*tokens (+attention) / (N*C)"),
             COLLECTIVE: BookPart(0.0, 0.0, "not in the book's prefill model"),
             MEMORY: BookPart(est.param_time_s, est.param_time_s * c.hbm_bytes_per_s,
                              "weights read once, W_bytes / (N*W_hbm)")}
    parts = _overlap(est.seconds, parts, "max(FLOPs time, weight-read time)")
    return Analytic(2.0 * matmul_params(model) * tokens + attention, est.seconds,
                    "2*P*tokens/(N*C) vs W_bytes/(N*W_hbm) (inference.md)",
                    MFU_FORMULA["prefill"], est.flops, parts)


def _decode(cfg, mesh, chip) -> Analytic:
    model, n = _model(cfg), math.prod(_mesh_sizes(mesh))
    step = inference.decode_step(model, chip, n, cfg.B, cfg.S,
                                 weight_bytes=1 if cfg.int8_weights else 2,
                                 kv_bytes=1 if cfg.int8_kv else 2, dtype=_dtype(cfg))
    c = hardware.chip_entry(chip)
    memory_s = step.kv_time_s + step.param_time_s
    parts = {MATMUL: BookPart(step.flops_time_s, step.flops / n, "2*P*B / (N*C)"),
             COLLECTIVE: BookPart(0.0, 0.0, "not in the book's decode model"),
             MEMORY: BookPart(memory_s, memory_s * c.hbm_bytes_per_s,
                              "KV cache + weights read, bytes / (N*W_hbm)")}
    parts = _overlap(step.step_s, parts, "max(FLOPs time, weight-read time)")
    # inference.md: a decode step is 2 * P FLOPs per sequence, plus its queries' attention
    attention = transformer.attention_flops(model, cfg.B, cfg.S)
    return Analytic(2.0 * matmul_params(model) * cfg.B + attention, step.step_s,
                    "B*KV/(N*W_hbm) + max(2*B*P/(N*C), W/(N*W_hbm)) (inference.md)",
                    MFU_FORMULA["decode"], 2.0 * transformer.param_count(model) * cfg.B, parts)


ANALYTIC: dict[str, Callable] = {
    "matmul": _matmul,
    "collective": _collective,
    "llama_train": _train,
    "llama_prefill": _prefill,
    "llama_decode": _decode,
}


def analytic(workload: str, cfg, mesh, chip) -> Analytic | None:
    """The book's figures for a workload step, or None when the workload has no entry."""
    fn = ANALYTIC.get(workload)
    return fn(cfg, mesh, chip) if fn else None
