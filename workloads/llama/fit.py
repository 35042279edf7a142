"""``llama_train``'s memory knobs that ``predict-hlo``'s fit search may compile
(``harness.plan.search``), each with the bytes a device the memory model gives it
(``workloads.llama.memory.train_bytes``) and the FLOPs a device its step does.

Every setting MaxText's configs use: each remat policy (``workloads.llama.remat.POLICIES``),
those that keep everything in HBM from the least recomputation to the most, then the offload
policies, the named ones and the custom ones of MaxText's published configs
(``remat.OFFLOADS``), which move activations to host memory and pay the host link instead; each
with the loss over the fewest chunks (``num_vocab_tiling``, a divisor of T) that bring the step
within the budget (`loss.py`: one chunk's fp32 logits live). A policy no chunking brings within
the budget keeps the most chunks and its modelled bytes say so (the search prunes it).

The search compiles them cheapest first by the step time it predicts from ``FitTrial.flops``
and ``host_bytes``; the FLOPs a device are the step's (`transformers.md`: 6 · matmul
parameters · tokens plus the attention, halved by the causal mask as splash does it), what the
policy recomputes (``remat.Remat.recompute_flops``: block remat one more forward, reference
§5.2) and, with the loss in chunks, the output projection once more in the backward
(2·D·V a token, ``loss.py``). Each also carries the collectives its weights and gradients take
(``collectives``, `training.md`), which the search prices over the chip's ICI; the settings
beyond remat and offload (ZeRO stages, microbatches, a smaller batch) are
``workloads.llama.fit_more``'s.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import jax.numpy as jnp

from predictions import transformer
from workloads.base import OFFLOAD_STAGE, REMAT_STAGE, FitCollective, FitTrial, replace_config
from workloads.llama import memory, remat
from workloads.llama.book import matmul_params, moe_params
from workloads.llama.config import book_model
from workloads.llama.sharding import split_of
from workloads.mesh import axis_size

CHUNKS = "num_vocab_tiling"
DONATE = "donate_state"


def policies() -> list[tuple[str, dict[str, str]]]:
    """``(stage, config values)`` of each policy: those kept in HBM, least recomputation
    first, then the offloads (the search orders them by predicted cost)."""
    keep = [(REMAT_STAGE, {"remat": n}) for n, p in remat.POLICIES.items() if not p.offloaded]
    named = [(OFFLOAD_STAGE, {"remat": n}) for n, p in remat.POLICIES.items() if p.offloaded]
    custom = [(OFFLOAD_STAGE, {"remat": remat.CUSTOM, "remat_offload": ",".join(names)})
              for names in remat.OFFLOADS]
    return keep + named + custom


def divisors(T: int) -> list[int]:
    """The chunk counts the loss can take: the divisors of T, ascending."""
    return [n for n in range(1, T + 1) if T % n == 0]


def chunked(cfg, mesh, sets: Mapping[str, str], budget: float, given: Mapping[str, str],
            zero: int | None = None) -> tuple[dict[str, str], float]:
    """``(sets with num_vocab_tiling, modelled bytes)``: the fewest chunks that bring the step
    within ``budget`` bytes a device, else the most (the given count, if one was given);
    ``zero``: the ZeRO stage the bytes are modelled at (``memory.train_bytes``)."""
    counts = [int(given[CHUNKS])] if CHUNKS in given else divisors(cfg.T)
    for n in counts:
        trial = {CHUNKS: str(n), **sets}
        need = memory.total(memory.train_bytes(replace_config(cfg, trial), mesh, zero))
        if need <= budget:
            break
    return trial, need


def step_flops(cfg, mesh) -> float:
    """FLOPs a device of one step at ``cfg``'s remat and loss chunks (module docstring): the
    model's 6 · matmul parameters · tokens and causal attention (`transformers.md`), the
    forward the policy recomputes in every layer, and the chunked loss's second output
    projection (2·D·V a token), over the mesh's devices."""
    model, tokens = book_model(cfg), cfg.B * cfg.T
    flops = (6 * matmul_params(model) * tokens
             + transformer.attention_flops(model, tokens, cfg.T, training=True, causal=True))
    flops += cfg.L * tokens * cfg.remat_policy().recompute_flops(cfg, cfg.T, causal=True)
    if cfg.num_vocab_tiling > 1:
        flops += 2 * cfg.D * cfg.V * tokens
    return flops / (math.prod(mesh.axis_sizes) if mesh is not None else 1)


def collectives(cfg, mesh, zero: int | None = None) -> tuple[FitCollective, ...]:
    """The collectives of one step's weights and gradients (`training.md`, reference §6.1), of
    W = the bf16 weights a device holds gathered (P / model devices): over FSDP axes, W
    all-gathered in the forward and again in the backward and the gradients reduce-scattered
    (3W a step); over data axes (the weights replicated), the gradients all-reduced (2W; the
    book's DP), or under ZeRO-1/2 (``zero``; None: 1 with ``zero1``) reduce-scattered and the
    updated weights all-gathered (2W, the same traffic). Over ``microbatches`` accumulated
    each microbatch gathers the weights and reduces its gradients (the loop's body holds them;
    XLA does not hoist them), the updated weights are gathered once. TP's activations move the
    same bytes whatever these knobs and are left out; none for a MoE or pipelined step."""
    if mesh is None or getattr(cfg, "E", 0) or memory.pipelined(cfg, mesh):
        return ()
    layout, shape = split_of(cfg.parallelism, mesh), dict(mesh.shape)
    data = tuple(a for a in layout.batch if a not in layout.fsdp + layout.model)
    sizes = lambda axes: tuple(shape[a] for a in axes)  # noqa: E731
    W = moe_params(cfg)[0] * jnp.dtype(cfg.param_dtype).itemsize / axis_size(mesh, layout.model)
    M, out = cfg.microbatches, []
    if layout.fsdp:
        over = sizes(layout.fsdp)
        out += [FitCollective("all-gather", W, over, 2 * M),
                FitCollective("reduce-scatter", W, over, M)]
    if data:
        V, over = W / axis_size(mesh, layout.fsdp), sizes(data)
        if ((1 if cfg.zero1 else 0) if zero is None else zero) in (1, 2):
            out += [FitCollective("reduce-scatter", V, over, M),
                    FitCollective("all-gather", V, over, 1)]
        else:
            out.append(FitCollective("all-reduce", V, over, M))
    return tuple(out)


def trial(cfg, mesh, sets: Mapping[str, str], stage: str, policy: str, need: float,
          zero: int | None = None, **more) -> FitTrial:
    """The ``FitTrial`` of ``sets`` on ``cfg``: its host bytes, FLOPs and collectives from the
    config they make (``more``: ``steps``, ``compilable``, ``note``)."""
    at = replace_config(cfg, sets)
    return FitTrial(dict(sets), stage, policy, need, memory.host_bytes(at, mesh),
                    step_flops(at, mesh), collectives(at, mesh, zero), **more)


def donated(given: Mapping[str, str]) -> dict[str, str]:
    """``donate_state=true`` unless it was given (``trials``)."""
    return {} if DONATE in given else {DONATE: "true"}


def trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """Every policy with its loss chunks, its bytes and its FLOPs (module docstring), in the
    order of ``policies``; each donates the state to the step unless ``donate_state`` was
    given, as MaxText's train step does and as the memory model counts it (the parameters
    and optimizer state once, written over in place; not donated, XLA keeps them twice)."""
    out = []
    for stage, sets in policies():
        chosen, need = chunked(cfg, mesh, sets, budget, given)
        label = ", ".join(f"{k}={v}" for k, v in sets.items())
        out.append(trial(cfg, mesh, {**chosen, **donated(given)}, stage, label, need))
    return out
