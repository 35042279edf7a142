"""Cost a compiled program on any chip without running it (real-size configs, `profiling.md`).

The HLO comes from an ahead-of-time compile (``workloads.aot``): for a TPU chip with libtpu, the
TPU compiler's own HLO for the matching slice; otherwise a compile on virtual CPU devices, whose
per-device shapes and collectives are those of the target mesh but whose fusion and collective
choices are XLA:CPU's (it never forms reduce-scatters, for one). The predicted step is the
program's schedule played with every op at its roofline time (``harness.step.simulate``): what
the schedule hides of its communication and what it leaves exposed; the per-op sum beside it
has no overlap at all (the book's upper bound). ``book_gap`` sets the step beside the book's
part by part (``harness.capture.memory.memory_fit``
sets ``memory_analysis()`` against the chip's HBM).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from harness import schema
from harness.hlo import Module, hlo_costs
from harness.step.simulate import Simulated, simulate
from harness.step.transfers import roofline_durations
from predictions import hardware
from predictions.step import COLLECTIVE, MATMUL, MEMORY, OVERLAP, PARTS


@dataclass
class ChipPrediction:
    """One chip's view of a compiled program."""

    chip: str
    ops: pd.DataFrame          # OPS[predicted], sorted by predicted_s
    categories: pd.DataFrame   # predicted time per category and bound
    totals: dict = field(default_factory=dict)
    step: Simulated | None = None  # the schedule played at the roofline


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
                   devices: int = 1, analytic_s: float | None = None,
                   system=None) -> ChipPrediction:
    """Per-op predictions of ``module`` on ``chip``, its simulated step and totals (seconds
    per step); ``system``: collectives priced at the network levels they cross."""
    pred = hlo_costs(module, chip, system=system).sort_values(schema.PREDICTED_S, ascending=False,
                                               kind="stable").reset_index(drop=True)
    durations = roofline_durations(module, pred)
    sim = simulate(module, durations.core_s, durations.transfer_s)
    step = sim.step_s
    totals = {schema.PREDICTED_STEP_S: step,
              schema.PREDICTED_EXPOSED_COMM_S: sim.exposed_comm_s,
              schema.PREDICTED_COMM_S: sim.comm_s,
              schema.CRITICAL_COMPUTE_S: sim.critical_compute_s,
              schema.CRITICAL_COMM_S: sim.critical_comm_s,
              schema.PREDICTED_OPS_S: float(pred[schema.PREDICTED_S].sum()),
              "compute_s": float(pred[schema.T_COMPUTE_S].sum()),
              "memory_s": float(pred[schema.T_MEMORY_S].sum()),
              "comm_s": float(pred[schema.T_COMM_S].sum()),
              "unmodeled_ops": int((pred[schema.BOUND] == schema.UNMODELED).sum()),
              "flops_per_device": float((pred[schema.FLOPS] * pred[schema.COUNT]).sum())}
    if not module.scheduled:
        totals[schema.SIMULATED_FROM] = "topological order"
    name = getattr(chip, "name", str(chip))
    if model_flops:
        peak = hardware.chip_entry(chip).flops_per_s("bf16")
        # MFU if the step ran as the schedule played at the roofline (training.md's definition)
        totals[schema.MFU_AT_ROOFLINE] = model_flops / (step * devices * peak) if step > 0 else 0.0
    if analytic_s is not None:
        totals[schema.ANALYTIC_S] = analytic_s  # the book's workload-level step time
    return ChipPrediction(name, pred, by_category(pred), totals, sim)


# HLO categories -> the book's parts of a step (predictions.step.PARTS)
PART_OF_CATEGORY: dict[str, str] = {
    "matmul": MATMUL, "attention": MATMUL, "collective": COLLECTIVE,
    "elementwise": MEMORY, "reduction": MEMORY, "copy": MEMORY,
    "other": MEMORY,
}
# which OPS column measures a part's work (FLOPs for matmuls, bytes otherwise)
WORK_COLUMN = {MATMUL: schema.FLOPS, COLLECTIVE: schema.COMM_BYTES,
               MEMORY: schema.HBM_BYTES}
STEP = "step"


def _hlo_parts(pred: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per part: (predicted seconds, work per device) summed over the part's ops."""
    part = pred[schema.CATEGORY].map(PART_OF_CATEGORY).fillna(MEMORY)
    out = {}
    for name, column in WORK_COLUMN.items():
        rows = pred[part == name]
        out[name] = (float(rows[schema.PREDICTED_S].sum()),
                     float((rows[column] * rows[schema.COUNT]).sum()))
    return out


def book_gap(parts: dict, compiles: dict[str, pd.DataFrame],
             steps: Mapping[str, float] | None = None) -> pd.DataFrame:
    """The compiled program's step next to the book's, part by part, for each compile's OPS
    table (``{"tpu": ops, "cpu": ops}``). ``parts``: ``predictions.step.Analytic.parts``;
    ``steps``: each compile's simulated step (``harness.step.simulate``).

    Per compile: ``<c>_s`` the part's predicted seconds; ``<c>_work_x`` its work (FLOPs or
    bytes per device) over the book's; ``<c>_excess_s`` the seconds beyond that work done at the
    book's rate (memory-bound matmuls, collective latency and hops, ...), or the plain difference
    where the book gives no work (overlap, step, a part it leaves out). The ``overlap`` row is
    what the simulated schedule hides, the step minus the sum of the parts (<= 0, as the
    book's); with no simulated step, the per-op sum has none (0), and it is the step."""
    hlo = {c: _hlo_parts(ops) for c, ops in compiles.items()}
    steps = steps or {}
    rows = []
    for name in (*PARTS, STEP):
        bp = parts.get(name)
        book_s = sum(p.seconds for p in parts.values()) if name == STEP else bp.seconds
        work = bp.work if bp is not None else None
        row = {schema.PART: name, schema.BOOK_S: book_s,
               schema.BOOK_WORK: float("nan") if work is None else work}
        for c, by_part in hlo.items():
            s, w = by_part.get(name, (0.0, 0.0))
            total = sum(v[0] for v in by_part.values())
            if name == STEP:
                s = steps.get(c, total)
            elif name == OVERLAP:
                s = steps.get(c, total) - total  # what the schedule hides
            ratio = w / work if work else float("nan")
            row[schema.HLO_S.format(compile=c)] = s
            row[schema.WORK_X.format(compile=c)] = ratio
            # with no work to scale by (overlap, step, a part the book leaves out): plain gap
            row[schema.EXCESS_S.format(compile=c)] = s - (ratio * book_s if work else book_s)
        rows.append(row)
    return pd.DataFrame(rows)
