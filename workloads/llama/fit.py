"""``llama_train``'s memory knobs in the order ``predict-hlo``'s fit search tries them
(``harness.plan.search``), each with the bytes a device the memory model gives it
(``workloads.llama.memory.train_bytes``).

Cheapest first, as MaxText's configs set them: for each remat policy from the least
recomputation to the most (``workloads.llama.remat.POLICIES``, those that keep everything in
HBM), the loss over the fewest chunks (``num_vocab_tiling``, a divisor of T) that bring the step
within the budget (`loss.py`: one chunk's fp32 logits live, the price one more output
projection in the backward); then the offload policies, the named ones and the custom ones of
MaxText's published configs (``remat.OFFLOADS``), which move activations to host memory and pay
the host link instead. A policy no chunking brings within the budget keeps the most chunks and
its modelled bytes say so (the search prunes it).
"""
from __future__ import annotations

from collections.abc import Mapping

from workloads.base import OFFLOAD_STAGE, REMAT_STAGE, FitTrial, replace_config
from workloads.llama import memory, remat

CHUNKS = "num_vocab_tiling"


def policies() -> list[tuple[str, dict[str, str]]]:
    """``(stage, config values)`` of each policy, in the order the search tries them."""
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


def trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """Every policy with its loss chunks, cheapest first (module docstring)."""
    out = []
    for stage, sets in policies():
        trial, need = chunked(cfg, mesh, sets, budget, given)
        label = ", ".join(f"{k}={v}" for k, v in sets.items())
        host = memory.host_bytes(replace_config(cfg, trial), mesh)
        out.append(FitTrial(trial, stage, label, need, host))
    return out
