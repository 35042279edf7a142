"""The book's model of a LLaMA-3 step (``Workload.book``): train, prefill and decode.

Each maps a config, a mesh and a chip to ``predictions.step.Analytic``: the step's useful FLOPs
over all devices (for MFU), the book's step time, and its parts (matmul, collective, memory,
overlap) for ``harness.plan.predict.book_gap``.

A MoE model (E > 0) is priced as its active part (``config.book_model``: an MLP of width
(k + shared)·F, plus the routers; reference §5.4, §6.4: 6·P_active per training token); its total
parameters are ``moe_params``'. The book's step time here leaves out the expert all-to-alls and
prices FSDP's weight traffic by the active weights (``predictions`` prices MoE in issue 54).

MFU counts the work the hardware must do (as MaxText does): 6 (training) or 2 (inference) x
the parameters that take part in matmuls x tokens, plus attention. The input embedding is a
gather and the norms are elementwise, so neither counts; the output projection does. The book's
6 x all parameters x tokens (``transformer.train_flops``) stays for its planning answers in
``predictions/`` and is reported beside it (``book_flops``), so a program that does the model's
work shows HFU >= MFU.
"""
from __future__ import annotations

import math

from predictions import hardware, inference, layouts, training, transformer
from predictions.step import (
    COLLECTIVE,
    MATMUL,
    MEMORY,
    Analytic,
    BookPart,
    book_dtype,
    with_overlap,
)
from workloads.llama.config import book_model

# MaxText's MFU numerator: parameters that take part in matmuls (module docstring)
MFU_FORMULA = {
    "train": "6*P_matmul*tokens + 12*B*T*T*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV "
             "(MaxText: no input embedding, no norms)",
    "prefill": "2*P_matmul*tokens + 4*B*T*T*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV",
    "decode": "2*P_matmul*B + 4*B*S*N*H*L, P_matmul = L*(3DF + 2D(N+K)H) + DV",
}
# MoE (E > 0): P_matmul counts the active parameters, F -> (k + shared)*F plus the router's
# D*E per layer (reference §5.4: FLOPs follow the active parameters; ``moe_params``)


def matmul_params(model: transformer.Config) -> int:
    """Parameters that take part in matmuls: every layer's MLP and attention projections and
    the output projection (D x V, shared with the input embedding when tied)."""
    return model.L * (transformer.mlp_params(model) + transformer.attention_params(model)) \
        + model.D * model.V


def moe_params(cfg) -> tuple[int, int]:
    """(total, active) parameters (`transformers.md` MoE, reference §5.4): a MoE layer holds
    E·3DF routed parameters and a D·E router, k·3DF of them active per token (plus the
    shared expert's 3DF, always on); a dense model's are both its count."""
    active = transformer.param_count(book_model(cfg))
    if not getattr(cfg, "E", 0):
        return active, active
    router = _router_params(cfg)
    idle = cfg.L * (cfg.E - cfg.k) * 3 * cfg.D * cfg.F   # the experts a token skips, 3DF each
    return active + router + idle, active + router


def _router_params(cfg) -> int:
    """The routers' D·E per layer: matmul parameters the active model's count leaves out."""
    return cfg.L * cfg.D * cfg.E if getattr(cfg, "E", 0) else 0


def _active_matmul(cfg, model: transformer.Config) -> int:
    """Matmul parameters a token meets: the active model's and, for MoE, the routers."""
    return matmul_params(model) + _router_params(cfg)


def _devices(mesh) -> tuple[int, ...]:
    """The mesh's axis sizes, in order."""
    return tuple(int(n) for n in dict(mesh.shape).values())


def train(cfg, mesh, chip) -> Analytic:
    """A training step (forward, backward, AdamW) under ``cfg.parallelism`` (`training.md`):
    the registry's layout (``predictions.layouts``) names the book's model that prices it and
    its X (data and FSDP devices) and Y (model devices) on the mesh."""
    model, sizes = book_model(cfg), _devices(mesh)
    n = math.prod(sizes)
    tokens = cfg.B * cfg.T
    entry = layouts.layout(cfg.parallelism)
    strategy = entry.strategy
    try:
        X, Y = layouts.degrees(entry, dict(mesh.shape))
    except ValueError:  # a mesh the layout does not fit (a stored run's): X its first axis
        X, Y = sizes[0], n // sizes[0]
    st = training.step_time(model, tokens, chip, n, strategy=strategy, X=X, Y=Y,
                            dtype=book_dtype(cfg.param_dtype), seq_len=cfg.T)
    attention = transformer.attention_flops(model, tokens, cfg.T, training=True)
    book_flops = transformer.train_flops(model, tokens, seq_len=cfg.T)
    # training.md: comm time = bytes / W per axis (M_X = M_Y = 1 here), so bytes = T_comms * W
    W = hardware.chip_entry(chip).axis_bytes_per_s
    parts = {MATMUL: BookPart(st.t_math_s, book_flops / n, "6*P*tokens (+attention) / (N*C)"),
             COLLECTIVE: BookPart(st.t_comms_s, st.t_comms_s * W,
                                  "FSDP AllGather/ReduceScatter of weights + TP AllGather/"
                                  "ReduceScatter of activations, bytes / W_ici"),
             MEMORY: BookPart(0.0, 0.0, "not in the book's training model")}
    parts = with_overlap(st.t_step_s, parts, "per layer max(T_math, T_comms), not the sum")
    # transformers.md: 6 * P * tokens plus attention for training (P: matmul parameters)
    # MoE (reference §5.4, §6.4): 6 * P_active * tokens, the routers' D*E per layer with them
    return Analytic(6.0 * _active_matmul(cfg, model) * tokens + attention, st.t_step_s,
                    f"training.md {strategy} step, X={X} Y={Y}", MFU_FORMULA["train"],
                    book_flops + 6.0 * _router_params(cfg) * tokens, parts)


def prefill(cfg, mesh, chip) -> Analytic:
    """Prefill of B prompts of T tokens: FLOPs against one read of the weights (`inference.md`)."""
    model, n = book_model(cfg), math.prod(_devices(mesh))
    tokens = cfg.B * cfg.T
    est = inference.prefill(model, chip, n, tokens, weight_bytes=1 if cfg.int8_weights else 2,
                            dtype=book_dtype(cfg.dtype), seq_len=cfg.T)
    attention = transformer.attention_flops(model, tokens, cfg.T)
    c = hardware.chip_entry(chip)
    parts = {MATMUL: BookPart(est.flops_time_s, est.flops / n,
                              "2*P*tokens (+attention) / (N*C)"),
             COLLECTIVE: BookPart(0.0, 0.0, "not in the book's prefill model"),
             MEMORY: BookPart(est.param_time_s, est.param_time_s * c.hbm_bytes_per_s,
                              "weights read once, W_bytes / (N*W_hbm)")}
    parts = with_overlap(est.seconds, parts, "max(FLOPs time, weight-read time)")
    return Analytic(2.0 * _active_matmul(cfg, model) * tokens + attention, est.seconds,
                    "2*P*tokens/(N*C) vs W_bytes/(N*W_hbm) (inference.md)",
                    MFU_FORMULA["prefill"], est.flops, parts)


def decode(cfg, mesh, chip) -> Analytic:
    """One decode step of B sequences against S cached tokens (`inference.md`)."""
    model, n = book_model(cfg), math.prod(_devices(mesh))
    step = inference.decode_step(model, chip, n, cfg.B, cfg.S,
                                 weight_bytes=1 if cfg.int8_weights else 2,
                                 kv_bytes=1 if cfg.int8_kv else 2, dtype=book_dtype(cfg.dtype))
    c = hardware.chip_entry(chip)
    memory_s = step.kv_time_s + step.param_time_s
    parts = {MATMUL: BookPart(step.flops_time_s, step.flops / n, "2*P*B / (N*C)"),
             COLLECTIVE: BookPart(0.0, 0.0, "not in the book's decode model"),
             MEMORY: BookPart(memory_s, memory_s * c.hbm_bytes_per_s,
                              "KV cache + weights read, bytes / (N*W_hbm)")}
    parts = with_overlap(step.step_s, parts, "max(FLOPs time, weight-read time)")
    # inference.md: a decode step is 2 * P FLOPs per sequence, plus its queries' attention
    attention = transformer.attention_flops(model, cfg.B, cfg.S)
    return Analytic(2.0 * _active_matmul(cfg, model) * cfg.B + attention, step.step_s,
                    "B*KV/(N*W_hbm) + max(2*B*P/(N*C), W/(N*W_hbm)) (inference.md)",
                    MFU_FORMULA["decode"], 2.0 * transformer.param_count(model) * cfg.B, parts)
