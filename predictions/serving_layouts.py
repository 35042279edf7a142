"""Where a decode step's weights and KV cache lie (inference.md §7.4; reference §7.4), priced.

On N = X * Y chips the weights are model-parallel over Y (Megatron: heads, F and V split; never
FSDP, which would move the weights every step) and replicated over X, which splits the batch.
The KV cache of the B/X sequences a replica holds is laid out one of three ways:

- ``heads``: over the KV heads, at most K-way; beyond K the K/V heads are replicated, so each
  chip reads Y/K times its share of the cache;
- ``batch``: the book's layout KV[2, B_Z, S, K_Y, H]: heads K-way, then the batch over the
  Z = Y/K chips that share a head, costing two AllToAlls per attention layer (the queries to
  batch sharding and the outputs back);
- ``sequence``: heads K-way, then the sequence over Z: per layer an AllGather of the queries
  and a flash-style combine of the Z partial softmaxes (an AllReduce of their maxima, then one
  of the rescaled partial outputs with their sums, in f32); for long contexts.

A chip's step: its KV read and the layout's collectives (attention, bandwidth-bound), plus the
model-parallel layer's max(T_params, T_flops, T_ici) (``predictions.serving``).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from predictions import collectives, hardware, transformer
from predictions.hardware import Chip
from predictions.serving import ACT_BYTES, Precision, mp_ici_time, precision, torus_axes
from predictions.transformer import Config

LONG_CONTEXT = 16384  # tokens per sequence from which the sequence-sharded cache is tried
COMBINE_BYTES = 4     # the sequence-sharded cache combines its partial softmaxes in f32


@dataclass(frozen=True)
class KVLayout:
    """How one replica's cache splits over its Y chips: ``share`` the fraction of the cache a
    chip holds, ``comm`` the seconds of the layout's own collectives per step."""

    name: str
    about: str
    share: Callable[[Config, int], float]
    comm: Callable[[Config, float, int, Chip], float]


def _heads_share(cfg: Config, Y: int) -> float:
    return 1 / min(Y, cfg.K)  # §7.4: over KV heads at most K-way, replicated beyond


def _full_share(cfg: Config, Y: int) -> float:
    return 1 / Y  # heads K-way, then batch (or sequence) over Z = Y/K


def _q_bytes(cfg: Config, B: float) -> float:
    """The queries (and attention outputs) of one KV head group: B * (N/K) * H in bf16."""
    return ACT_BYTES * B * cfg.N / cfg.K * cfg.H


def _group(cfg: Config, Y: int, chip: Chip) -> tuple[int, ...]:
    return torus_axes(chip, max(1, Y // cfg.K))


def _batch_comm(cfg: Config, B: float, Y: int, chip: Chip) -> float:
    """§7.4: two AllToAlls per attention layer over the Z chips sharing a head."""
    if Y <= cfg.K:
        return 0.0
    return cfg.L * 2 * collectives.all_to_all(_q_bytes(cfg, B), _group(cfg, Y, chip), chip)


def sequence_collectives(cfg: Config, B: float, act_bytes: float = ACT_BYTES
                         ) -> tuple[tuple[str, float], ...]:
    """One attention layer's collectives over the Z chips of the sequence-sharded cache, as
    ``workloads.llama.attention_seq`` builds them (§7.4: AllGather Q, combine flash-style):
    (kind, ``collectives``' bytes) for the AllGather of the B * (N/K) * H queries of a head group,
    the AllReduce (max) of their B * (N/K) f32 maxima, then the AllReduce (sum) of the partial
    outputs and sums, B * (N/K) * (H + 1) f32."""
    rows = B * cfg.N / cfg.K
    return (("all-gather", act_bytes * rows * cfg.H), ("all-reduce", COMBINE_BYTES * rows),
            ("all-reduce", COMBINE_BYTES * rows * (cfg.H + 1)))


def _sequence_comm(cfg: Config, B: float, Y: int, chip: Chip) -> float:
    if Y <= cfg.K:
        return 0.0
    g = _group(cfg, Y, chip)
    return cfg.L * sum(collectives.estimate(kind, n, g, chip).seconds
                       for kind, n in sequence_collectives(cfg, B))


KV_LAYOUTS: dict[str, KVLayout] = {k.name: k for k in (
    KVLayout("heads", "KV over heads up to K-way, replicated beyond", _heads_share,
             lambda cfg, B, Y, chip: 0.0),
    KVLayout("batch", "KV[2, B_Z, S, K_Y, H]: heads K-way, batch over Y/K; 2 AllToAlls a layer",
             _full_share, _batch_comm),
    KVLayout("sequence", "heads K-way, sequence over Y/K; AllGather Q, combine flash-style "
             "(AllReduce of the maxima, then of the partial outputs)",
             _full_share, _sequence_comm),
)}


# The llama workloads' parallelism that builds a KV layout (``workloads.llama.sharding``):
# name -> (the weights' layout in ``predictions.layouts``, the cache's layout here). ``heads`` is
# any plain layout (``dp_tp``); a KV layout not listed is priced here, not built. Each is a
# layout of ``predictions.layouts`` too (registered there), so ``--set parallelism=`` and
# ``--layout`` take it like any other.
WORKLOAD_PARALLELISMS: dict[str, tuple[str, str]] = {"dp_tp_kv_batch": ("dp_tp", "batch"),
                                                     "dp_tp_kv_seq": ("dp_tp", "sequence")}


def batch_kv_axes(shape: dict[str, int], model: tuple[str, ...], K: int
                  ) -> tuple[dict[str, int], tuple[str, ...], tuple[str, ...]]:
    """The book's KV[2, B_Z, S, K_Y, H] on a mesh of ``shape`` (axis -> size, in order) whose
    ``model`` axes hold Y > K devices (§7.4): the leading model axes for the K heads, the rest
    (Z = Y/K) for the batch, an axis cut in two where K falls inside it (``Y`` of 8 with K = 4:
    ``Y`` of 4 then ``Y_z`` of 2, device y = k*Z + z). Returns (the new shape, the heads' axes,
    the Z axes); ValueError where K does not fall on a cut."""
    out, heads, z, acc = {}, [], [], 1
    for a, n in shape.items():
        if a not in model or acc == K:
            out[a] = n
            z += [a] if a in model else []
            continue
        r = min(n, K // acc)
        if K % acc or n % r:
            raise ValueError(f"K={K} KV heads do not split the model axes "
                             f"{', '.join(f'{x}={shape[x]}' for x in model)}; valid: model axes "
                             f"whose leading sizes multiply to K")
        out[a], acc = r, acc * r
        heads.append(a)
        if r < n:
            out[f"{a}_z"] = n // r
            z.append(f"{a}_z")
    return out, tuple(heads), tuple(z)


@dataclass(frozen=True)
class LayoutPrice:
    """One serving layout on X replicas x Y model-parallel chips at batch B, priced."""

    kv_layout: str
    X: int
    Y: int
    B: int
    weights_bytes: float  # per chip
    kv_bytes: float       # per chip
    fits: bool
    B_max: int            # the largest batch whose caches fit this layout
    kv_s: float
    kv_comm_s: float
    params_s: float
    flops_s: float
    ici_s: float
    step_s: float
    tokens_per_s_per_chip: float

    @property
    def mesh(self) -> str:
        return f"{self.X}x{self.Y}"


def price(cfg: Config, chip: Chip | str, kv_layout: str, X: int, Y: int, B: int, S: float,
          prec: str | Precision = "bf16", dtype: str = "bf16") -> LayoutPrice:
    """One layout's step (inference.md §7.3-7.4) and memory per chip at batch B (split over the
    X replicas) with S cached tokens per sequence."""
    c, pr, lay = hardware.chip_entry(chip), precision(prec), KV_LAYOUTS[kv_layout]
    P = transformer.param_count(cfg)
    weights = P * pr.weight_bytes / Y  # model-parallel over Y, replicated over X
    per_seq = transformer.kv_cache_bytes(cfg, S, pr.kv_bytes) * lay.share(cfg, Y)
    B_max = max(0, math.floor((c.hbm_bytes - weights) / per_seq)) * X
    Br = B / X
    kv = Br * per_seq
    kv_s = kv / c.hbm_bytes_per_s  # inference.md: attention always reads its cache from HBM
    comm = lay.comm(cfg, Br, Y, c)
    params_s = weights / c.hbm_bytes_per_s
    flops_s = 2 * P * B / (X * Y * c.flops_per_s(dtype))  # inference.md: 2 * P * B / (N * C)
    ici = mp_ici_time(cfg, Br, Y, c)
    step = kv_s + comm + max(params_s, flops_s, ici)  # §7.4: the model-parallel layer's max
    return LayoutPrice(kv_layout, X, Y, B, weights, kv, weights + kv <= c.hbm_bytes, B_max,
                       kv_s, comm, params_s, flops_s, ici, step, B / (step * X * Y))


def candidates(cfg: Config, N: int, S: float, B: int) -> list[tuple[str, int, int]]:
    """(KV layout, X, Y) to price on N chips: every power-of-two Y with X = N/Y dividing B;
    ``heads`` always, ``batch`` where Y > K, ``sequence`` where Y > K and S >= LONG_CONTEXT."""
    out = []
    Y = 1
    while Y <= N:
        X = N // Y
        if N % Y == 0 and B % X == 0:
            out.append(("heads", X, Y))
            if Y > cfg.K:
                out.append(("batch", X, Y))
                if S >= LONG_CONTEXT:
                    out.append(("sequence", X, Y))
        Y *= 2
    return out


def ranked(cfg: Config, chip: Chip | str, N: int, B: int, S: float,
           prec: str | Precision = "bf16", dtype: str = "bf16") -> list[LayoutPrice]:
    """Every candidate priced, those that fit first, fastest step first."""
    priced = [price(cfg, chip, k, X, Y, B, S, prec, dtype) for k, X, Y in
              candidates(cfg, N, S, B)]
    return sorted(priced, key=lambda p: (not p.fits, p.step_s))
