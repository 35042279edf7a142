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
(2·D·V a token, ``loss.py``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from predictions import transformer
from workloads.base import OFFLOAD_STAGE, REMAT_STAGE, FitTrial, replace_config
from workloads.llama import memory, remat
from workloads.llama.book import matmul_params
from workloads.llama.config import book_model

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


def chunked(cfg, mesh, sets: Mapping[str, str], budget: float,
            given: Mapping[str, str]) -> tuple[dict[str, str], float]:
    """``(sets with num_vocab_tiling, modelled bytes)``: the fewest chunks that bring the step
    within ``budget`` bytes a device, else the most (the given count, if one was given)."""
    counts = [int(given[CHUNKS])] if CHUNKS in given else divisors(cfg.T)
    for n in counts:
        trial = {CHUNKS: str(n), **sets}
        need = memory.total(memory.train_bytes(replace_config(cfg, trial), mesh))
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


def trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """Every policy with its loss chunks, its bytes and its FLOPs (module docstring), in the
    order of ``policies``; each donates the state to the step unless ``donate_state`` was
    given, as MaxText's train step does and as the memory model counts it (the parameters
    and optimizer state once, written over in place; not donated, XLA keeps them twice)."""
    out = []
    donate = {} if DONATE in given else {DONATE: "true"}
    for stage, sets in policies():
        trial, need = chunked(cfg, mesh, sets, budget, given)
        trial = {**trial, **donate}
        label = ", ".join(f"{k}={v}" for k, v in sets.items())
        at = replace_config(cfg, trial)
        out.append(FitTrial(trial, stage, label, need, memory.host_bytes(at, mesh),
                            step_flops(at, mesh)))
    return out
