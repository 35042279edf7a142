"""The cheapest ways to fit, as advice for a program the harness cannot change (a user's own
function or script): each remedy's bytes saved per device, computed from what holds the peak
(``harness.memory.kinds``: parameters, optimizer state, gradients, activations, temporaries,
arguments) and the book's arithmetic, ranked by bytes saved per unit of cost.

A remedy is a function in ``REMEDIES`` of ``Held`` (bytes at the peak per kind, and the f32
bytes among them) returning ``(bytes saved, cost, how)``, or None where it saves nothing.
``cost`` is the step time it adds, as a fraction (the book's where it gives one, else the
assumption its comment states); ``COST_FLOOR`` keeps free ones finite, so they rank by bytes.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from harness import schema, units
from harness.memory import kinds

COST_FLOOR = 0.01  # a remedy that adds no FLOPs still costs something (a code change, numerics)
STATE = (kinds.PARAMETERS, kinds.OPTIMIZER, kinds.GRADIENTS, kinds.ARGUMENTS)
COLUMNS = ("remedy", "saves_bytes", "peak_after_bytes", "fits", "cost", "how")


@dataclass
class Held:
    """Per device: bytes at the peak per kind (``kinds.KINDS``), of which ``f32`` are fp32
    (per kind), over ``devices`` devices, against ``peak`` and ``capacity``; ``undonated``:
    ``memory_analysis()``'s outputs - aliased, at most its arguments."""

    by_kind: Mapping[str, int]
    f32: Mapping[str, int] = field(default_factory=dict)
    devices: int = 1
    peak: int = 0
    capacity: int | None = None
    undonated: int = 0  # outputs not aliased onto an argument, up to the arguments' bytes

    def get(self, *names: str) -> int:
        return sum(int(self.by_kind.get(n, 0)) for n in names)


def _donate(h: Held):
    # a step that returns new parameters and optimizer state beside the old ones holds both;
    # donated, XLA writes the new ones over the old (outputs aliased onto arguments)
    return (h.undonated, COST_FLOOR, "donate the arguments the step returns anew (the state it "
                                     "replaces): jax.jit(step, donate_argnums=...)"
            ) if h.undonated else None


def _smaller_batch(h: Held):
    # activations and a step's temporaries scale with B (transformers.md §5.2: 2·20·B·T·D·L);
    # half the batch, two microbatches accumulated, keeps the step's FLOPs (training.md §6.4);
    # its cost is reading the weights twice: assumed 2% of the step
    saved = h.get(kinds.ACTIVATIONS, kinds.TEMPORARIES) // 2
    return (saved, 0.02, "halve the batch B (accumulate 2 microbatches to keep the global "
                         "batch)") if saved else None


def _remat_full(h: Held):
    # block remat keeps each layer's input, 1 of ~20 width-D tensors (transformers.md §5.2:
    # 2·20·BTDL -> 2·BTDL); training goes from 6·P to 8·P FLOPs a token: +1/3
    saved = h.get(kinds.ACTIVATIONS) * 19 // 20
    return (saved, 1 / 3, "remat every layer: jax.checkpoint(layer, policy="
                          "jax.checkpoint_policies.nothing_saveable)") if saved else None


def _remat_dots(h: Held):
    # the "only big matmul outputs" policy keeps ~7 of ~20 tensors a layer (transformers.md
    # §5.2); it recomputes the elementwise ops and attention, assumed a tenth of the step
    saved = h.get(kinds.ACTIVATIONS) * 13 // 20
    return (saved, 0.10, "remat all but the matmuls: jax.checkpoint(layer, policy="
                         "jax.checkpoint_policies.dots_with_no_batch_dims_saveable)"
            ) if saved else None


def _fsdp(h: Held):
    # FSDP/ZeRO-3 divides parameters, optimizer state and gradients by the devices they are
    # sharded over (training.md §6.3); its all-gathers and reduce-scatters move what DP's
    # all-reduce moves (training.md §6), so it adds no time where the step is compute-bound
    n, state = h.devices, h.get(*STATE)
    if n < 2 or not state:
        return None
    return (state * (n - 1) // n, COST_FLOOR,
            f"shard parameters, optimizer state and gradients over the {n} devices (FSDP / "
            f"ZeRO-3: PartitionSpec over a mesh axis of {n} for each weight's largest dim)")


def _zero1(h: Held):
    # ZeRO-1: only the optimizer state sharded, 8 of AdamW's 10 bytes a parameter (§6.3)
    n, opt = h.devices, h.get(kinds.OPTIMIZER)
    if n < 2 or not opt:
        return None
    return (opt * (n - 1) // n, COST_FLOOR,
            f"shard the optimizer state over the {n} devices (ZeRO-1)")


def _bf16(h: Held):
    # bf16 weights, gradients and activations where they are fp32 (training.md §6.3 counts
    # bf16 weights, 2 of the 10 bytes a parameter; the moments stay fp32): half their bytes
    names = (kinds.PARAMETERS, kinds.GRADIENTS, kinds.ACTIVATIONS, kinds.ARGUMENTS)
    saved = sum(int(h.f32.get(n, 0)) for n in names) // 2
    return (saved, COST_FLOOR, "keep weights, gradients and activations in bfloat16 (moments "
                               "in fp32)") if saved else None


def _int8_moments(h: Held):
    # 8-bit optimizer moments: 1 byte where AdamW keeps 4 (§6.3's 8 of 10 bytes -> 2)
    saved = int(h.f32.get(kinds.OPTIMIZER, 0)) * 3 // 4
    return (saved, COST_FLOOR, "int8 optimizer moments (8-bit AdamW)") if saved else None


def _offload(h: Held):
    # the optimizer state in host memory (MaxText's optimizer offload): all of it leaves the
    # HBM; read and written once a step over PCIe, assumed 10% of the step
    opt = h.get(kinds.OPTIMIZER)
    return (opt, 0.10, "offload the optimizer state to host memory (memory_kind="
                       "'pinned_host' shardings for opt_state)") if opt else None


REMEDIES: dict[str, Callable[[Held], object]] = {
    "donate arguments": _donate, "smaller batch": _smaller_batch, "remat (dots saved)": _remat_dots,
    "remat (full)": _remat_full, "FSDP / ZeRO-3": _fsdp, "ZeRO-1": _zero1,
    "bf16 where fp32": _bf16, "int8 moments": _int8_moments, "host offload": _offload}


def rank(h: Held) -> pd.DataFrame:
    """``COLUMNS``: every remedy that saves bytes, by bytes saved per cost, largest first."""
    rows = []
    for name, remedy in REMEDIES.items():
        found = remedy(h)
        if not found:
            continue
        saved, cost, how = found
        after = max(0, h.peak - saved)
        rows.append({"remedy": name, "saves_bytes": int(saved), "peak_after_bytes": after,
                     "fits": None if h.capacity is None else after <= h.capacity,
                     "cost": max(cost, COST_FLOOR), "how": how})
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if not len(df):
        return df
    order = (df["saves_bytes"] / df["cost"]).sort_values(ascending=False, kind="stable")
    return df.loc[order.index].reset_index(drop=True)


def f32_by_kind(buffers: pd.DataFrame) -> dict[str, int]:
    """Bytes at the peak per kind held as fp32 (the buffers' shapes)."""
    if not len(buffers):
        return {}
    f32 = buffers[buffers[schema.SHAPE].astype(str).str.startswith("f32")]
    return {k: int(v) for k, v in f32.groupby(schema.HOLDS)[schema.BUFFER_BYTES].sum().items()}


def lines(df: pd.DataFrame, top: int = 6) -> list[str]:
    """One line per remedy: what it saves, the peak after it, whether that fits, how."""
    out = []
    for i, r in enumerate(df.head(top).itertuples(index=False), 1):
        verdict = "" if r.fits is None else (", fits" if r.fits else ", not enough alone")
        cost = "no added FLOPs" if r.cost <= COST_FLOOR else f"+{r.cost:.0%} step time"
        out.append(f"{i}. {r.remedy}: saves {units.fmt_bytes(r.saves_bytes)} (peak "
                   f"{units.fmt_bytes(r.peak_after_bytes)}{verdict}; {cost}): {r.how}")
    return out
