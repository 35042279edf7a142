"""Serving (inference.md, applied-inference.md; reference §7): the latency-throughput frontier
over batch size, time to first token, QPS and cost per chip, the smallest slice per precision
and for a latency target, the prefill:generate ratio, the eviction rate, speculative sampling.

Letters as the book's: B sequences decoded together (one token each per step), S cached tokens
per sequence (the context), p prompt and g generated tokens, N chips, Y the model-parallel
degree, X = N/Y replicas, K KV heads. Step time (§7.3, §7.4):

    T_step = T_kv + max(T_params, T_flops, T_ici)

T_kv = the KV bytes a chip reads / W_hbm (attention is always bandwidth-bound), and the
matmuls the book's model-parallel layer: the slowest of reading the weights, their FLOPs and
the ICI exchange of activations (two AllReduces of [B, D] per block, Megatron).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from predictions import collectives, hardware, inference, transformer
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.transformer import Config

ACT_BYTES = 2  # activations exchanged in bf16 (inference.md: T_ici = 2BD / W_ici)


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter and per KV element (applied-inference.md: "both KVs and parameters")."""

    name: str
    weight_bytes: float
    kv_bytes: float


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("bf16", 2, 2), Precision("int8", 1, 1), Precision("int4", 0.5, 0.5))}


def precision(name: str | Precision) -> Precision:
    """A Precision passes through; a name is looked up (KeyError lists the valid)."""
    if isinstance(name, Precision):
        return name
    try:
        return PRECISIONS[name]
    except KeyError:
        raise KeyError(f"unknown precision {name!r}; valid: {', '.join(PRECISIONS)}") from None


def torus_axes(chip: Chip, n: int) -> tuple[int, ...]:
    """n chips as torus axes no longer than the chip's largest slice axis (tpus.md)."""
    side = max(chip.max_slice) if chip.max_slice else n
    axes = []
    while n > side:
        axes.append(side)
        n //= side
    return tuple(axes + [n])


def mp_ici_time(cfg: Config, B: float, Y: int, chip: Chip | str) -> float:
    """inference.md §7.4: the model-parallel layer's ICI, per block two AllReduces of the
    [B, D] activations over the Y model axis (after W_O and after W_out), priced as sharding.md
    prices an AllReduce (bandwidth 2BD/W_ici each half, or the hops' latency if longer)."""
    c = hardware.chip_entry(chip)
    if Y <= 1:
        return 0.0
    one = collectives.all_reduce(ACT_BYTES * B * cfg.D, torus_axes(c, Y), c)
    return cfg.L * 2 * one


@dataclass(frozen=True)
class Point:
    """One batch size on the frontier: the step's terms, per-token latency (= the step), tokens
    and queries per second per chip, time to first token and cost per million tokens."""

    precision: str
    B: int
    N: int
    kv_s: float
    params_s: float
    flops_s: float
    ici_s: float
    step_s: float
    bound: str  # "kv" | "params" | "flops" | "ici": the largest term
    tokens_per_s_per_chip: float
    qps_per_chip: float
    ttft_s: float
    usd_per_million_tokens: float | None = None


def step_terms(cfg: Config, chip: Chip | str, N: int, B: float, S: float,
               prec: str | Precision = "bf16", Y: int | None = None, dtype: str = "bf16"
               ) -> dict[str, float]:
    """The decode step's terms (inference.md §7.3: T_kv + max(T_params, T_flops); §7.4: the
    model-parallel layer's T_ici beside them), weights and KV spread over N chips."""
    p = precision(prec)
    s = inference.decode_step(cfg, chip, N, B, S, p.weight_bytes, p.kv_bytes, dtype)
    ici = mp_ici_time(cfg, B / (N // (Y or N)), Y or N, chip)
    terms = {"kv": s.kv_time_s, "params": s.param_time_s, "flops": s.flops_time_s, "ici": ici}
    terms["step"] = s.kv_time_s + max(s.param_time_s, s.flops_time_s, ici)
    return terms


def ttft(cfg: Config, chip: Chip | str, N: int, p: float, prec: str | Precision = "bf16",
         mfu: float = 0.5, dtype: str = "bf16") -> float:
    """inference.md §7.1: time to first token = the prompt's prefill, 2*P*p/(N*C*MFU) plus its
    attention (the book's applied-inference.md guesses ~50% MFU for prefill)."""
    return inference.prefill(cfg, chip, N, p, mfu, precision(prec).weight_bytes, dtype,
                             seq_len=p).seconds


def qps_per_chip(B: float, step_s: float, g: float, N: int) -> float:
    """applied-inference.md: QPS per chip = B / (T_step * g * N), g decode steps a query."""
    return B / (positive("step_s", step_s) * positive("g", g) * positive("N", N))


def usd_per_million_tokens(usd_per_chip_hour: float, tokens_per_s_per_chip: float) -> float:
    """Cost of a million generated tokens at a price the user gives per chip-hour
    (applied-inference.md prices v5e at $1.2/h as an example; no price is built in)."""
    return positive("usd_per_chip_hour", usd_per_chip_hour) / 3600 / positive(
        "tokens_per_s_per_chip", tokens_per_s_per_chip) * 1e6


def batch_sizes(B_max: int) -> list[int]:
    """1, 2, 4, ... below ``B_max``, then ``B_max`` itself (the largest that fits)."""
    out = [2 ** k for k in range(max(0, B_max).bit_length()) if 2 ** k < B_max]
    return out + [B_max] if B_max >= 1 else []


def frontier(cfg: Config, chip: Chip | str, N: int, p: float, g: float,
             prec: str | Precision = "bf16", S: float | None = None, mfu: float = 0.5,
             usd_per_chip_hour: float | None = None, dtype: str = "bf16",
             batches: list[int] | None = None) -> list[Point]:
    """applied-inference.md's latency-throughput frontier: one Point per batch size up to the
    largest whose KV caches of S = p + g tokens fit beside the weights (``inference.max_batch``)."""
    pr = precision(prec)
    S = p + g if S is None else S
    B_max = inference.max_batch(cfg, chip, N, S, pr.weight_bytes, pr.kv_bytes)
    first = ttft(cfg, chip, N, p, pr, mfu, dtype)
    out = []
    for B in batches or batch_sizes(B_max):
        t = step_terms(cfg, chip, N, B, S, pr, dtype=dtype)
        tps = B / (t["step"] * N)  # applied-inference.md: throughput per chip = B/(latency*N)
        cost = None if usd_per_chip_hour is None else usd_per_million_tokens(
            usd_per_chip_hour, tps)
        bound = max(("kv", "params", "flops", "ici"), key=t.get)
        out.append(Point(pr.name, B, N, t["kv"], t["params"], t["flops"], t["ici"], t["step"],
                         bound, tps, qps_per_chip(B, t["step"], g, N), first, cost))
    return out


def pareto(points: list[Point]) -> list[Point]:
    """The points no other beats on both latency (lower) and tokens/s per chip (higher)."""
    return [a for a in points if not any(
        b.step_s <= a.step_s and b.tokens_per_s_per_chip >= a.tokens_per_s_per_chip and
        (b.step_s, b.tokens_per_s_per_chip) != (a.step_s, a.tokens_per_s_per_chip)
        for b in points)]


def smallest_slice(cfg: Config, chip: Chip | str, prec: str | Precision = "bf16") -> int:
    """applied-inference.md: the smallest slice holding the weights, 2^ceil(log2(W / HBM))
    (v5e, LLaMA-3 70B: bf16 4x4, int8 4x2, int4 2x2)."""
    return inference.min_chips(cfg, chip, precision(prec).weight_bytes)


def full_hbm_step(chip: Chip | str) -> float:
    """applied-inference.md: with HBM full of weights and KV, a step reads every chip's HBM
    once: HBM / W_hbm (v5e: 16e9 / 8.2e11 = 19.5 ms)."""
    c = hardware.chip_entry(chip)
    return c.hbm_bytes / c.hbm_bytes_per_s


def largest_slice(chip: Chip | str) -> int:
    """Chips in the largest ICI-connected slice (tpus.md; unlimited: 2^16)."""
    c = hardware.chip_entry(chip)
    return math.prod(c.max_slice) if c.max_slice else 2 ** 16


def slice_for_latency(cfg: Config, chip: Chip | str, target_s: float, S: float,
                      prec: str | Precision = "bf16", B: int = 1, dtype: str = "bf16"
                      ) -> tuple[int, int] | None:
    """The smallest power-of-two slice (from ``smallest_slice``) whose step at batch B meets
    ``target_s`` per token, and the largest batch on it that still does; None when no slice up
    to the largest ICI slice does (inference.md §7.3: the step falls as N grows)."""
    positive("target_s", target_s)
    pr, N = precision(prec), smallest_slice(cfg, chip, prec)
    while N <= largest_slice(chip):
        B_max = inference.max_batch(cfg, chip, N, S, pr.weight_bytes, pr.kv_bytes)
        if B_max >= B and step_terms(cfg, chip, N, B, S, pr, dtype=dtype)["step"] <= target_s:
            lo, hi = B, B_max  # the step grows with B: bisect the largest within the target
            while lo < hi:
                mid = (lo + hi + 1) // 2
                ok = step_terms(cfg, chip, N, mid, S, pr, dtype=dtype)["step"] <= target_s
                lo, hi = (mid, hi) if ok else (lo, mid - 1)
            return N, lo
        N *= 2
    return None


def prefill_generate_ratio(B: float, g: float, prefill_s: float, step_s: float) -> float:
    """applied-inference.md ("What about prefill?"): B/g sequences finish each decode step and
    each needs a prefill of ``prefill_s``: prefill servers per generate server
    = (B/g) * T_prefill / T_step (B=240, g=512, T_prefill = 2 T_step: 0.94, i.e. 1:1)."""
    return positive("B", B) / positive("g", g) * positive("prefill_s", prefill_s) / positive(
        "step_s", step_s)


@dataclass(frozen=True)
class Eviction:
    """Continuous batching (inference.md §7.3): sequences finished (and prefilled anew) per
    step and per second, and the KV tokens evicted per step."""

    sequences_per_step: float
    sequences_per_s: float
    tokens_per_step: float


def eviction(B: float, p: float, g: float, step_s: float) -> Eviction:
    """inference.md §7.3: with prompts of p and generations of g tokens, B/g sequences end each
    step, freeing B*(p + g)/g cached tokens."""
    per_step = positive("B", B) / positive("g", g)
    return Eviction(per_step, per_step / positive("step_s", step_s), per_step * (p + g))


@dataclass(frozen=True)
class Speculative:
    """Speculative sampling with gamma draft tokens accepted each with probability alpha and a
    drafter costing c target-model steps per draft token."""

    alpha: float
    gamma: int
    c: float
    tokens_per_step: float
    speedup: float


def speculative(alpha: float, gamma: int, c: float) -> Speculative:
    """Leviathan et al. 2023 (eq. 1, thm 3.8) and Chen et al. 2023: the target model's
    expected tokens per verification step E = (1 - alpha^(gamma+1)) / (1 - alpha), and the
    speedup in wall time E / (gamma*c + 1). The book (inference.md) gives no number: verifying
    gamma tokens costs about one memory-bound step, which is what the formula assumes."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"acceptance rate alpha must be in [0, 1], got {alpha!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"draft tokens gamma must be a positive whole number, got {gamma!r}")
    if not c >= 0:
        raise ValueError(f"drafter cost c must be >= 0, got {c!r}")
    E = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return Speculative(alpha, gamma, c, E, E / (gamma * c + 1))


def kv_bytes_per_token(cfg: Config, prec: str | Precision = "bf16") -> float:
    """transformers.md: 2 * L * K * H * bytes per element (LLaMA-3 70B int8: 163,840 B)."""
    return transformer.kv_cache_bytes(cfg, 1, precision(prec).kv_bytes)
