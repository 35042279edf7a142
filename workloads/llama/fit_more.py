"""``llama_train``'s settings for ``predict-hlo``'s fit search beyond remat and offload (issue 56
part 3): the ZeRO stages, gradient accumulation over microbatches and a smaller batch, each a
``FitTrial`` beside ``workloads.llama.fit``'s policies, in one ranking (``trials``).

Each pairs its knob with the policy kept in HBM that recomputes least and fits (``cheapest``;
the loss in the fewest chunks that fit, ``fit.chunked``), else the one the memory model gives
the fewest bytes (the search prunes it). From `training.md` (reference §6.1, §6.3):

- ZeRO, for a layout whose weights are replicated over data axes (``dp``, ``dp_tp``): ZeRO-1
  (``zero1``) the AdamW moments over the data devices, ZeRO-2 the gradients too (modelled
  only: ``llama_train`` has no knob for it, so it is ranked and never compiled), ZeRO-3 the
  weights as well, the FSDP layout on the same axes (``fsdp``, ``fsdp_tp``); ZeRO-1/2 move dp's
  2x the weights a step over ICI, ZeRO-3 3x (``fit.collectives``).
- Microbatches (``microbatches``, gradient accumulation: ``microbatches.accumulate``), each M
  that keeps B/M over the batch axes: one microbatch's activations, logits and transients
  (1/M), the same FLOPs, the weights' collectives M times.
- A smaller batch: the largest B' (a divisor of B still over the batch axes) at which the
  policy that recomputes least and does not fit at B fits; B/B' of its steps carry the batch's
  tokens and are priced together (time per token). It changes the optimisation (a different
  batch), so it is ranked and never compiled.

None for a MoE or pipelined step (their own searches: ``harness.plan.experts``,
``harness.plan.pipeline``) nor for a knob given on the command line.
"""
from __future__ import annotations

from collections.abc import Mapping

from predictions import layouts
from workloads.base import (
    BATCH_STAGE,
    LAYOUT_FIELD,
    MICROBATCH_STAGE,
    REMAT_STAGE,
    ZERO_STAGES,
    FitTrial,
    WorkloadError,
    replace_config,
)
from workloads.llama import fit, memory
from workloads.llama.sharding import split_of
from workloads.mesh import axis_size

ZERO1, MICROBATCHES, BATCH = "zero1", "microbatches", "B"


def knobs(sets: Mapping[str, str]) -> str:
    """The policy label of ``sets``: its knobs but the loss chunks (a retry changes them)."""
    return ", ".join(f"{k}={v}" for k, v in sets.items() if k != fit.CHUNKS)


def by_flops(cfg, mesh) -> list[dict[str, str]]:
    """The policies kept in HBM, least recomputation first (``fit.step_flops``, the whole loss)."""
    kept = [sets for stage, sets in fit.policies() if stage == REMAT_STAGE]
    return sorted(kept, key=lambda s: fit.step_flops(replace_config(cfg, s), mesh))


def cheapest(cfg, mesh, sets: Mapping[str, str], budget: float, given: Mapping[str, str],
             zero: int | None = None) -> tuple[dict[str, str], float]:
    """``(sets with the policy and loss chunks, modelled bytes)``: the policy kept in HBM that
    recomputes least and fits ``budget``, else the one of the fewest bytes."""
    tried = [fit.chunked(cfg, mesh, {**sets, **p}, budget, given, zero)
             for p in by_flops(cfg, mesh)]
    return next((t for t in tried if t[1] <= budget), min(tried, key=lambda t: t[1]))


def _plain(cfg, mesh) -> bool:
    """A dense, unpipelined step on a mesh: the one these settings apply to."""
    return mesh is not None and not getattr(cfg, "E", 0) and not memory.pipelined(cfg, mesh)


def zero3_layout(cfg, mesh) -> str | None:
    """The FSDP layout on ``cfg.parallelism``'s axes, its data role made fsdp (``dp`` ->
    ``fsdp``, ``dp_tp`` -> ``fsdp_tp``); None where none is registered or fits ``mesh``."""
    roles = tuple("fsdp" if r == "data" else r for r in layouts.layout(cfg.parallelism).axes)
    name = next((n for n, e in layouts.LAYOUTS.items() if tuple(e.axes) == roles), None)
    try:
        return name if name and split_of(name, mesh) else None
    except WorkloadError:
        return None


def zero_trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """ZeRO-1, ZeRO-2 (modelled only) and ZeRO-3 (module docstring), for a layout that
    replicates the state over data devices and no ``zero1`` given."""
    n = memory.data_degree(cfg, mesh) if _plain(cfg, mesh) else 1
    if n == 1 or ZERO1 in given or cfg.zero1:
        return []
    donate, fsdp = fit.donated(given), zero3_layout(cfg, mesh)
    stages = [(1, {ZERO1: "true"}, True, f"ZeRO-1: the AdamW moments over the {n} data devices"),
              (2, {ZERO1: "true"}, False, f"ZeRO-2: the moments and gradients over the {n} data "
                                          f"devices; modelled only (llama_train has no knob "
                                          f"for it)")]
    if fsdp:
        stages.append((3, {LAYOUT_FIELD: fsdp}, True,
                       f"ZeRO-3: weights, gradients and moments over the {n} data devices, "
                       f"gathered just in time (3x the weights a step over ICI, dp 2x)"))
    out = []
    for zero, sets, compilable, note in stages:
        modelled = zero if zero == 2 else None
        chosen, need = cheapest(cfg, mesh, sets, budget, given, modelled)
        out.append(fit.trial(cfg, mesh, {**chosen, **donate}, ZERO_STAGES[zero],
                             f"{ZERO_STAGES[zero]}: {knobs(chosen)}", need, modelled,
                             compilable=compilable, note=note))
    return out


def _batch_split(cfg, mesh) -> int:
    """Devices the batch is split over."""
    return axis_size(mesh, split_of(cfg.parallelism, mesh).batch or None)


def microbatch_trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """Each M > 1 microbatches that keep B/M over the batch axes (module docstring), unless
    ``microbatches`` was given."""
    if not _plain(cfg, mesh) or MICROBATCHES in given or cfg.microbatches > 1:
        return []
    b, out = _batch_split(cfg, mesh), []
    for M in fit.divisors(cfg.B)[1:]:
        if (cfg.B // M) % b:
            continue
        chosen, need = cheapest(cfg, mesh, {MICROBATCHES: str(M)}, budget, given)
        out.append(fit.trial(cfg, mesh, {**chosen, **fit.donated(given)}, MICROBATCH_STAGE,
                             knobs(chosen), need,
                             note=f"gradients accumulated over {M} microbatches of "
                                  f"{cfg.B // M}: 1/{M} of the activations, the weights' "
                                  f"collectives {M}x"))
    return out


def batch_trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """The largest smaller batch that fits with the policy that recomputes least and does not
    fit at B (module docstring); none where that policy fits at B. Where none fits at any, the
    smallest batch with the policy of fewest bytes (pruned)."""
    if not _plain(cfg, mesh):
        return []
    b = _batch_split(cfg, mesh) * cfg.microbatches
    smaller = [n for n in reversed(fit.divisors(cfg.B)) if n < cfg.B and n % b == 0]
    if not smaller:
        return []
    tried, fits = [], []
    for policy in by_flops(cfg, mesh):
        if fit.chunked(cfg, mesh, policy, budget, given)[1] <= budget:
            return []
        tried += [(n, *fit.chunked(cfg, mesh, {BATCH: str(n), **policy}, budget, given))
                  for n in smaller]
        fits = [t for t in tried if t[2] <= budget]   # this policy's, the largest B' first
        if fits:
            break
    n, chosen, need = fits[0] if fits else min(tried, key=lambda t: t[2])
    steps = cfg.B / n
    return [fit.trial(cfg, mesh, {**chosen, **fit.donated(given)}, BATCH_STAGE, knobs(chosen),
                      need, steps=steps, compilable=False,
                      note=f"B={n}: {steps:g} steps carry the batch's {cfg.B} sequences, priced "
                           f"together; a different batch changes the optimisation (not "
                           f"compiled: --set B={n} to try it)")]


def trials(cfg, mesh, budget: float, given: Mapping[str, str]) -> list[FitTrial]:
    """Every setting of ``llama_train``'s fit search: ``fit.trials``' policies, then the ZeRO
    stages, the microbatches and a smaller batch."""
    return (fit.trials(cfg, mesh, budget, given) + zero_trials(cfg, mesh, budget, given)
            + microbatch_trials(cfg, mesh, budget, given) + batch_trials(cfg, mesh, budget, given))
