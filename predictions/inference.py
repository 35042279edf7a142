"""Inference (inference.md, applied-inference.md): decode step time, prefill time, batch limits.

The book uses beta for two different ratios; here they are ``beta_bits`` (bits per weight /
bits per activation, the critical-batch rule) and ``beta_bw`` (W_hbm / W_ici, the decode
model-parallel rule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from predictions import hardware, transformer
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.transformer import Config


def beta_bits(weight_bits: float, activation_bits: float) -> float:
    """inference.md's first beta: bits per weight / bits per activation (B_crit = beta * alpha)."""
    return positive("weight_bits", weight_bits) / positive("activation_bits", activation_bits)


def beta_bw(chip: Chip | str) -> float:
    """inference.md's second beta: W_hbm / W_ici (bidirectional per axis); ~8 on v5e/v6e."""
    c = hardware.chip_entry(chip)
    return c.hbm_bytes_per_s / c.axis_bytes_per_s


def critical_batch(chip: Chip | str, weight_bytes: float = 2, dtype: str = "bf16") -> float:
    """roofline.md/inference.md: B_crit = C_compute * s_w / (2 * W_hbm) tokens (v5e bf16: 240;
    int8 weights with bf16 compute: 120; int8 weights and compute: 240)."""
    c = hardware.chip_entry(chip)
    return c.flops_per_s(dtype) * positive("weight_bytes", weight_bytes) / (2 * c.hbm_bytes_per_s)


def decode_ici_bound_tp(F: float, batch: float, chip: Chip | str) -> float:
    """inference.md: in decode, ICI dominates model parallelism only when Y > F / (B * beta_bw)."""
    return positive("F", F) / (positive("batch", batch) * beta_bw(chip))


@dataclass(frozen=True)
class DecodeStep:
    """inference.md: step = kv_time + max(flops_time, param_time) (attention is always
    memory-bound)."""

    batch: float
    num_chips: int
    kv_bytes: float
    param_bytes: float
    flops: float
    kv_time_s: float
    param_time_s: float
    flops_time_s: float
    step_s: float
    bound: str  # "memory" | "compute" (of the matmuls)

    @property
    def tokens_per_s(self) -> float:
        return self.batch / self.step_s  # applied-inference.md: throughput = B / latency

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.num_chips


def decode_terms(params: float, param_bytes: float, kv_bytes: float, batch: float,
                 chip: Chip | str, num_chips: int, dtype: str = "bf16") -> DecodeStep:
    """The book's general decode step from raw sizes: ``params`` (count, for FLOPs),
    ``param_bytes`` and ``kv_bytes`` (whole batch) spread evenly over ``num_chips``."""
    c = hardware.chip_entry(chip)
    positive("num_chips", num_chips)
    positive("batch", batch)
    hbm = num_chips * c.hbm_bytes_per_s
    kv_t = kv_bytes / hbm  # applied-inference.md: kv_time = kv_bytes / (chips * W_hbm)
    param_t = positive("param_bytes", param_bytes) / hbm  # param_time = W_bytes/(chips * W_hbm)
    flops = 2 * positive("params", params) * batch  # inference.md: 2 * P * B FLOPs per step
    flops_t = flops / (num_chips * c.flops_per_s(dtype))
    step = kv_t + max(flops_t, param_t)  # inference.md: general step time
    return DecodeStep(batch, num_chips, kv_bytes, param_bytes, flops, kv_t, param_t, flops_t,
                      step, "compute" if flops_t > param_t else "memory")


def decode_step(cfg: Config, chip: Chip | str, num_chips: int, batch: float, context: float,
                weight_bytes: float = 2, kv_bytes: float = 2, dtype: str = "bf16") -> DecodeStep:
    """One decode step of ``batch`` sequences with ``context`` cached tokens each.
    ``weight_bytes``/``kv_bytes``: bytes per parameter / per KV element; FLOPs at ``dtype``."""
    P = transformer.param_count(cfg)
    kv = positive("batch", batch) * transformer.kv_cache_bytes(cfg, context, kv_bytes)
    return decode_terms(P, P * positive("weight_bytes", weight_bytes), kv, batch, chip,
                        num_chips, dtype)


def decode_step_time(cfg: Config, chip: Chip | str, num_chips: int, batch: float,
                     context: float, weight_bytes: float = 2, kv_bytes: float = 2,
                     dtype: str = "bf16") -> float:
    """Seconds per decode step (see ``decode_step`` for the terms)."""
    return decode_step(cfg, chip, num_chips, batch, context, weight_bytes, kv_bytes, dtype).step_s


@dataclass(frozen=True)
class PrefillEstimate:
    """Prefill: FLOPs time at an MFU vs the time to read the weights once."""

    tokens: float
    flops: float
    flops_time_s: float
    param_time_s: float
    seconds: float
    bound: str  # "compute" | "memory"


def prefill(cfg: Config, chip: Chip | str, num_chips: int, tokens: float, mfu: float = 1.0,
            weight_bytes: float = 2, dtype: str = "bf16", seq_len: float | None = None
            ) -> PrefillEstimate:
    """inference.md: T_prefill = 2 * P * tokens / (N * C * MFU) (+ attention with ``seq_len``),
    never below reading the weights once, W_bytes / (N * W_hbm)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    c = hardware.chip_entry(chip)
    positive("num_chips", num_chips)
    flops = transformer.forward_flops(cfg, tokens, seq_len)
    flops_t = flops / (num_chips * c.flops_per_s(dtype) * mfu)
    param_t = transformer.param_count(cfg) * weight_bytes / (num_chips * c.hbm_bytes_per_s)
    return PrefillEstimate(tokens, flops, flops_t, param_t, max(flops_t, param_t),
                           "compute" if flops_t >= param_t else "memory")


def prefill_time(cfg: Config, chip: Chip | str, num_chips: int, tokens: float,
                 mfu: float = 1.0) -> float:
    """Seconds to prefill ``tokens`` tokens (see ``prefill`` for the terms)."""
    return prefill(cfg, chip, num_chips, tokens, mfu).seconds


def max_batch(cfg: Config, chip: Chip | str, num_chips: int, context: float,
              weight_bytes: float = 2, kv_bytes: float = 2) -> int:
    """applied-inference.md: sequences whose KV caches fit in the HBM left after the weights;
    0 when the weights alone do not fit."""
    c = hardware.chip_entry(chip)
    free = positive("num_chips", num_chips) * c.hbm_bytes - transformer.param_count(cfg) * \
        positive("weight_bytes", weight_bytes)
    per_seq = transformer.kv_cache_bytes(cfg, context, kv_bytes)
    return max(0, math.floor(free / per_seq))


def min_chips(cfg: Config, chip: Chip | str, weight_bytes: float = 2) -> int:
    """applied-inference.md: the smallest power-of-two slice holding the weights,
    2^ceil(log2(W_bytes / HBM per chip))."""
    need = transformer.param_count(cfg) * positive("weight_bytes", weight_bytes) / \
        hardware.chip_entry(chip).hbm_bytes
    return 2 ** max(0, math.ceil(math.log2(need)))


def latency_bound_tp(batch: float, D: float, chip: Chip | str, act_bytes: float = 1) -> float:
    """inference.md: a Y-way model-parallel exchange of B*D*act_bytes is latency-bound when
    the buffer < Y * W1 * T_min, i.e. Y > B*D*act_bytes / (W1*T_min) (v5e: B*D/45,000)."""
    c = hardware.chip_entry(chip)
    return positive("batch", batch) * positive("D", D) * act_bytes / (
        c.ici_bytes_per_s * c.hop_latency_s)


@dataclass(frozen=True)
class ModelParallelLayer:
    """inference.md: one model-parallel (Y-way) decode matmul layer's three terms."""

    t_hbm_s: float
    t_ici_s: float
    t_math_s: float
    bound: str  # "memory" | "comm" | "compute"


def model_parallel_layer(batch: float, D: float, F: float, Y: int, chip: Chip | str,
                         dtype: str = "bf16") -> ModelParallelLayer:
    """inference.md: T_hbm = 2DF/(Y*W_hbm), T_ici = 2BD/W_ici, T_math = 2BDF/(Y*C), bf16."""
    c = hardware.chip_entry(chip)
    B, Y = positive("batch", batch), positive("Y", Y)
    terms = {"memory": 2 * positive("D", D) * positive("F", F) / (Y * c.hbm_bytes_per_s),
             "comm": 2 * B * D / c.axis_bytes_per_s,
             "compute": 2 * B * D * F / (Y * c.flops_per_s(dtype))}
    return ModelParallelLayer(terms["memory"], terms["comm"], terms["compute"],
                              max(terms, key=terms.get))
