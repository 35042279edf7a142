"""Bytes per device a LLaMA-3 step needs, by component, from the config and the mesh: the
analytic side of the harness's memory check (which reads XLA's ``memory_analysis``).

Formulas from the book through ``predictions.transformer`` (`transformers.md`, reference §5):
P = ``param_count``; AdamW state is two moments per parameter (`training.md`: bf16 weights +
fp32 moments = 10 bytes/param, plus the gradient); activations kept for the backward pass are
the widths the remat policy keeps in HBM (``workloads.llama.remat``: none, ~20 width-D
tensors per layer and token; full, the layer input; the others, the layer input and the
projection outputs they save); the KV cache is ``kv_cache_bytes`` per token.
Each term is divided by the mesh axes that split it (``workloads.llama.sharding``: weights over
the FSDP and model axes, activations and the cache over the batch axes, and over the model axes
where heads, F or V are split; a MoE model's routed experts also over the expert axes, and
its activations as the active model's, ``config.book_model``). Transients of a single layer
(one layer's MLP activations, the materialised attention scores of the hand-written path) are
counted once.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from predictions import layouts, transformer
from workloads.llama import book, schedules
from workloads.llama.config import book_model
from workloads.llama.sharding import Sharder, Split, split_of
from workloads.mesh import AnyMesh, axis_size


def _nbytes(dtype: str) -> int:
    return jnp.dtype(dtype).itemsize


def _splits(cfg, mesh: AnyMesh | None) -> tuple[int, int, int]:
    """(weight shards, batch shards, model shards) of ``cfg.parallelism`` on ``mesh``."""
    if mesh is None:
        return 1, 1, 1
    layout: Split = split_of(cfg.parallelism, mesh)
    size = lambda axes: axis_size(mesh, axes) if axes else 1
    return size(layout.fsdp + layout.model), size(layout.batch), size(layout.model)


def _params(cfg, mesh: AnyMesh | None) -> float:
    """Parameters per device: each over the weight shards (FSDP and model axes), a MoE
    model's routed experts over the expert axes too (`gpus.md`, expert parallelism: W_in[E_Z,
    D, F]; the total count, reference §5.4: ``book.moe_params``)."""
    total, _ = book.moe_params(cfg)
    w, _, _ = _splits(cfg, mesh)
    if not getattr(cfg, "E", 0) or mesh is None:
        return total / w
    experts = cfg.L * cfg.E * 3 * cfg.D * cfg.F
    z = axis_size(mesh, split_of(cfg.parallelism, mesh).expert or None)
    return (total - experts) / w + experts / (w * z)


def _attention_scores(cfg, tokens: float, keys: float) -> float:
    """The hand-written path materialises fp32 scores and bf16 probabilities [B, N, T, S]."""
    return 0.0 if cfg.attention == "fused" else tokens * keys * cfg.N * (4 + 2)


def _logits(cfg, tokens: float, act: int) -> float:
    """fp32 logits and their gradient; over ``num_vocab_tiling`` chunks, one chunk's, beside
    the unembedding and its gradient gathered over FSDP (``workloads.llama.loss``)."""
    chunks = cfg.num_vocab_tiling
    gathered = 2 * cfg.D * cfg.V * act if chunks > 1 else 0.0
    return 2 * tokens * cfg.V * 4 / chunks + gathered


def _stages(cfg, mesh: AnyMesh | None) -> int:
    """S: devices along the layout's stage axes (1 without a pipeline)."""
    if mesh is None or getattr(cfg, "stages", 1) == 1:
        return 1
    shape = dict(mesh.shape)
    axes = layouts.stage_axes(layouts.layout(cfg.parallelism), shape)
    return math.prod(shape[a] for a in axes) if axes else 1


def pipelined(cfg, mesh: AnyMesh | None) -> bool:
    """Whether ``cfg`` runs as a pipeline on ``mesh`` (more than one stage)."""
    return _stages(cfg, mesh) > 1


def _pipelined(cfg, mesh, need: dict[str, float], S: int, b: int, m: int) -> dict[str, float]:
    """A pipeline's per-stage bytes (`training.md`, `gpus.md`; ``predictions.pipeline``): each
    stage holds L/S layers' weights, gradients and moments (embedding and head whole); its
    activations are the microbatches its schedule holds (GPipe, circular: all M; 1F1B: the
    stage inputs of min(M, 2S − 1) in flight and one microbatch's layers while recomputed);
    the loop's buffers of stage inputs and outputs, [M, B/M, T, D] each; the loss head runs
    with the batch also split over the stages (1F1B: on the last stage, a microbatch at a
    time); ZeRO-1 splits the moments over the batch axes too."""
    model, act = book_model(cfg), _nbytes(cfg.param_dtype)
    P = transformer.param_count(model)
    outer = 2 * cfg.D * cfg.V + cfg.D                  # embedding, unembedding, final norm
    share = ((P - outer) / S + outer) / P
    M, tokens = cfg.microbatches, cfg.B * cfg.T / b
    widths = act * cfg.remat_policy().hbm_width(cfg) / m
    if schedules.SCHEDULES[cfg.schedule].autodiff:
        held = tokens * cfg.L / S * widths
        logits = need["logits"] / S
    else:
        held = (min(M, 2 * S - 1) * tokens / M * cfg.D * act / m
                + tokens / M * cfg.L / S * widths)
        logits = need["logits"] / M
    out = {k: v * share for k, v in need.items() if k in ("parameters", "gradients",
                                                          "optimizer")}
    if cfg.zero1:
        out["optimizer"] /= b
    return {**need, **out, "activations": held, "logits": logits,
            "pipeline buffers": 2 * tokens * cfg.D * act / m}


# training.md (reference §6.1): ZeRO-1 shards the optimizer state over the data axes, ZeRO-2
# the gradients too (ZeRO-3 the weights as well: the fsdp layouts, ``_params``)
ZERO_SHARDED = {0: (), 1: ("optimizer",), 2: ("optimizer", "gradients")}


def data_degree(cfg, mesh: AnyMesh | None) -> int:
    """Devices along the axes that split the batch and not the weights (``dp``: every axis;
    ``dp_tp``: the first; ``fsdp``: none, 1): what ZeRO-1/2 shard the state over
    (``microbatches.zero1_specs``)."""
    if mesh is None:
        return 1
    layout: Split = split_of(cfg.parallelism, mesh)
    data = tuple(a for a in layout.batch if a not in layout.fsdp + layout.model)
    return axis_size(mesh, data) if data else 1


def train_bytes(cfg, mesh: AnyMesh | None = None, zero: int | None = None) -> dict[str, float]:
    """Per-device bytes of one ``llama_train`` step: parameters, gradients, AdamW moments,
    saved activations, the fp32 logits (and their gradient; one chunk's of ``num_vocab_tiling``),
    one layer's transients; pipelined, per stage (``_pipelined``). Unpipelined, over
    ``microbatches`` accumulated (``microbatches.accumulate``) the activations, logits and
    transients are one microbatch's and the gradients gain their fp32 sums; ``zero`` (None:
    1 with ``zero1``, else 0) divides what ``ZERO_SHARDED`` names by ``data_degree``."""
    S = _stages(cfg, mesh)
    if S > 1:
        _, b, m = _splits(cfg, mesh)
        return _pipelined(cfg, mesh, _train_bytes(cfg, mesh), S, b, m)
    need = _train_bytes(cfg, mesh, cfg.microbatches)
    stage = (1 if cfg.zero1 else 0) if zero is None else zero
    n = data_degree(cfg, mesh)
    return {k: v / n if k in ZERO_SHARDED[stage] else v for k, v in need.items()}


def _train_bytes(cfg, mesh: AnyMesh | None = None, M: int = 1) -> dict[str, float]:
    _, b, m = _splits(cfg, mesh)
    P = _params(cfg, mesh)     # per device
    act = _nbytes(cfg.param_dtype)
    tokens = cfg.B * cfg.T / b / M
    layer = tokens * (2 * cfg.F + (cfg.N + 2 * cfg.K) * cfg.H + 2 * cfg.D) * act / m
    return {
        "parameters": P * act,
        # over M > 1 microbatches, one microbatch's gradients beside their fp32 sums
        "gradients": P * act + (P * _nbytes("float32") if M > 1 else 0.0),
        "optimizer": 2 * P * _nbytes(cfg.opt_dtype),
        # transformers.md: checkpoint bytes = bytes · tokens · L · Σ(saved widths)
        "activations": act * tokens * cfg.L * cfg.remat_policy().hbm_width(cfg) / m,
        "logits": _logits(cfg, tokens, act) / m,
        "transients": layer + _attention_scores(cfg, tokens, cfg.T) / m,
    }


def host_bytes(cfg, mesh: AnyMesh | None = None) -> float:
    """Per-device bytes of host memory a ``llama_train`` step offloads: the activations its
    remat policy moves there, bytes · tokens · L · Σ(offloaded widths) as in HBM (LLaMA-3.1
    70B at 5 x 8192 tokens a chip, the layer input, Q, K, V and the attention output
    offloaded: 2 · 40960 · 80 · 26624 = 174.5 GB = 162.5 GiB, libtpu's "Used 162.50G of
    128.00G host"); unpipelined, one microbatch's of ``microbatches``)."""
    _, b, m = _splits(cfg, mesh)
    tokens = cfg.B * cfg.T / b / (cfg.microbatches if _stages(cfg, mesh) == 1 else 1)
    return _nbytes(cfg.param_dtype) * tokens * cfg.L * cfg.remat_policy().host_width(cfg) / m


def _cache_share(cfg, mesh: AnyMesh | None) -> float:
    """The share of one KV cache a device holds, as the workload's ``Sharder`` lays it out
    (its batch, heads and Z axes; reference §7.4): ``dp_tp`` the heads over the model axes,
    at most K-way (past K each head is stored once per model device that shares it,
    ``Sharder.kv_cached``: 1/K of the cache); ``dp_tp_kv_batch`` / ``dp_tp_kv_seq`` the book's
    KV[2, B_Z, S, K_Y, H]: heads K-way, the batch (or the sequence) over the Z = Y/K model
    devices that share a head, so 1/(data · K-way · Z)."""
    if mesh is None:
        return 1.0
    sh = Sharder(mesh, cfg.parallelism, cfg)
    ways = math.prod(axis_size(sh.mesh, a) for a in (sh.kv_batch, sh.kv_cached, sh.kv_seq))
    return sh.kv_repeat / ways


def serve_bytes(cfg, mesh: AnyMesh | None = None, prefill: bool = False) -> dict[str, float]:
    """Per-device bytes of ``llama_prefill`` / ``llama_decode``: weights, the KV cache (one
    copy: decode updates it in place; 2·L·B·S·K·H bytes, each device its ``_cache_share``),
    one layer's transients and the logits."""
    model, (_, b, m) = book_model(cfg), _splits(cfg, mesh)
    act = _nbytes(cfg.dtype)
    kv = transformer.kv_cache_bytes(model, cfg.B * cfg.S, 1 if cfg.int8_kv else act)
    tokens = cfg.B * (cfg.T if prefill else 1) / b
    keys = cfg.T if prefill else cfg.S
    layer = tokens * (2 * cfg.F + (cfg.N + 2 * cfg.K) * cfg.H + 2 * cfg.D) * act / m
    return {
        "parameters": _params(cfg, mesh) * (1 if cfg.int8_weights else act),
        "kv_cache": kv * _cache_share(cfg, mesh),
        "transients": layer + _attention_scores(cfg, tokens, keys) / m,
        "logits": cfg.B / b * cfg.V * act / m,
    }


def prefill_bytes(cfg, mesh: AnyMesh | None = None) -> dict[str, float]:
    return serve_bytes(cfg, mesh, prefill=True)


def total(need: dict[str, float]) -> float:
    return sum(need.values())
