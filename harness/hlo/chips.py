"""Cost a compiled program on any chip without running it (real-size configs, `profiling.md`).

The HLO comes from an ahead-of-time compile on virtual CPU devices (``workloads.aot``): its
per-device shapes and collectives are those of the target mesh, so each op's roofline time can
be set on any chip. The fusion and collective choices are XLA:CPU's (it never forms
reduce-scatters, for one), so a TPU or GPU compile of the same program may differ. The per-op
sum assumes no overlap between ops (the book's upper-bound view
of a schedule); the workload-level book estimate is shown beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness import schema
from harness.hlo import Module, hlo_costs
from predictions import hardware


@dataclass
class ChipPrediction:
    """One chip's view of a compiled program."""

    chip: str
    ops: pd.DataFrame          # OPS[predicted], sorted by predicted_s
    categories: pd.DataFrame   # predicted time per category and bound
    totals: dict = field(default_factory=dict)


def by_category(pred: pd.DataFrame) -> pd.DataFrame:
    """Predicted time per category, split by which roofline term binds."""
    table = pred.pivot_table(index=schema.CATEGORY, columns=schema.BOUND,
                             values=schema.PREDICTED_S, aggfunc="sum", fill_value=0.0)
    table.columns = [f"{bound}_s" for bound in table.columns]
    table[schema.PREDICTED_S] = table.sum(axis=1)
    total = table[schema.PREDICTED_S].sum()
    table[schema.SHARE] = table[schema.PREDICTED_S] / total if total > 0 else 0.0
    return table.sort_values(schema.PREDICTED_S, ascending=False).reset_index()


def predict_module(module: Module, chip, *, model_flops: float | None = None,
                   devices: int = 1, analytic_s: float | None = None) -> ChipPrediction:
    """Per-op predictions of ``module`` on ``chip`` with totals (seconds per step)."""
    pred = hlo_costs(module, chip).sort_values(schema.PREDICTED_S, ascending=False,
                                               kind="stable").reset_index(drop=True)
    step = float(pred[schema.PREDICTED_S].sum())
    totals = {schema.PREDICTED_STEP_S: step,
              "compute_s": float(pred[schema.T_COMPUTE_S].sum()),
              "memory_s": float(pred[schema.T_MEMORY_S].sum()),
              "comm_s": float(pred[schema.T_COMM_S].sum()),
              "unmodeled_ops": int((pred[schema.BOUND] == schema.UNMODELED).sum()),
              "flops_per_device": float((pred[schema.FLOPS] * pred[schema.COUNT]).sum())}
    name = getattr(chip, "name", str(chip))
    if model_flops:
        peak = hardware.chip_entry(chip).flops_per_s("bf16")
        # MFU if the step ran at the per-op roofline sum (training.md's definition)
        totals[schema.MFU_AT_ROOFLINE] = model_flops / (step * devices * peak) if step > 0 else 0.0
    if analytic_s is not None:
        totals[schema.ANALYTIC_S] = analytic_s  # the book's workload-level step time
    return ChipPrediction(name, pred, by_category(pred), totals)
