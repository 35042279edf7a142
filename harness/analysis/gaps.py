"""OPS[measured] + OPS[predicted] -> OPS: efficiency and gap per op, summaries per category.

The book's method (`profiling.md`): cost each op from its per-device HLO shapes, set the roofline
time against the measured duration, and rank ops by how much time they lose. ``predicted_s`` is
per step (one execution's roofline time times the executions per step), like ``measured_s``.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.async_pairs import left_out
from predictions.rules import ASYNC_PAIRS, COLLECTIVE_OPCODES, CONTAINERS

_KEYS = [schema.PROGRAM, schema.OP]
ASYNC_DONES = frozenset(ASYNC_PAIRS.values())  # the waiting half of each async pair


def join(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """The OPS table: every measured op, with its prediction or ``bound == "unmodeled"``.

    Ops that the HLO lists but the trace never shows (bitcasts, parameters, constants) cost
    nothing measurable and are left out; so are control-flow containers (``while``, ``call``,
    ``conditional``), whose measured time is that of the ops they run, already listed.
    Sorted by ``gap_s``, largest first.
    """
    schema.validate(measured, schema.OPS_MEASURED, where="join(measured)")
    schema.validate(predicted, schema.OPS_PREDICTED, where="join(predicted)")
    pred = predicted.drop(columns=[schema.COUNT]).drop_duplicates(_KEYS)
    for col in (schema.SOURCE_OP, schema.SOURCE_LINE, schema.RATE):
        if col not in pred.columns:
            pred = pred.assign(**{col: ""})
    ops = measured.merge(pred, on=_KEYS, how="left", validate="one_to_one")
    ops = ops[~ops[schema.OPCODE].isin(CONTAINERS)]
    missing = ops[schema.BOUND].isna()
    for col in (schema.BOUND, schema.CATEGORY, schema.OPCODE, schema.WHY_UNMODELED,
                schema.SOURCE_OP, schema.SOURCE_LINE, schema.RATE):  # text
        ops[col] = ops[col].astype(object)
    ops.loc[missing, schema.BOUND] = schema.UNMODELED
    ops.loc[missing, schema.CATEGORY] = schema.CAT_OTHER
    ops.loc[missing, schema.OPCODE] = ops.loc[missing, schema.SOURCE_OP] = ""
    ops.loc[missing, schema.SOURCE_LINE] = ops.loc[missing, schema.RATE] = ""
    ops.loc[missing, schema.WHY_UNMODELED] = "no instruction of this name in the program's HLO"
    unmodeled = ops[schema.BOUND] == schema.UNMODELED
    for col in (schema.PREDICTED_S, schema.T_COMPUTE_S, schema.T_MEMORY_S, schema.T_COMM_S,
                schema.FLOPS, schema.HBM_BYTES, schema.COMM_BYTES):
        ops[col] = ops[col].astype(float)
    ops.loc[unmodeled, schema.PREDICTED_S] = np.nan
    m = ops[schema.MEASURED_S]
    ops[schema.GAP_S] = m - ops[schema.PREDICTED_S].fillna(0.0)
    total = m.sum()
    ops[schema.SHARE] = m / total if total > 0 else np.nan
    waits = ops[schema.OPCODE].isin(ASYNC_DONES)
    if waits.any():  # shown apart: a -done's time is waiting, whichever half carries the work
        ops[schema.WAIT_S] = m.where(waits)
    # a -done measured as its wait but priced its whole transfer has no efficiency (async_pairs)
    ops[schema.EFFICIENCY] = (ops[schema.PREDICTED_S] / m.where(m > 0)).mask(left_out(ops))
    ops = ops.sort_values(schema.GAP_S, ascending=False, kind="stable").reset_index(drop=True)
    extra = [c for c in ops.columns if c not in schema.OPS]
    return ops[list(schema.OPS) + extra]


def by_category(ops: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted time per category; unmodeled ops count in ``unmodeled_s``."""
    schema.validate(ops, schema.OPS, where="by_category(ops)")
    modeled = ops[schema.BOUND] != schema.UNMODELED
    priced = modeled & ~left_out(ops)  # the ops whose efficiency workload_efficiency sums
    g = ops.assign(_eff_meas=ops[schema.MEASURED_S].where(priced, 0.0),
                   _eff_pred=ops[schema.PREDICTED_S].where(priced, 0.0).fillna(0.0),
                   _unmod=ops[schema.MEASURED_S].where(~modeled, 0.0),
                   _pred=ops[schema.PREDICTED_S].fillna(0.0))
    out = g.groupby(schema.CATEGORY).agg(
        **{schema.OPS_COUNT: (schema.OP, "count"),
           schema.MEASURED_S: (schema.MEASURED_S, "sum"),
           schema.PREDICTED_S: ("_pred", "sum"),
           "_eff_meas": ("_eff_meas", "sum"), "_eff_pred": ("_eff_pred", "sum"),
           schema.UNMODELED_S: ("_unmod", "sum")}).reset_index()
    out[schema.EFFICIENCY] = out["_eff_pred"] / out["_eff_meas"].where(out["_eff_meas"] > 0)
    total = out[schema.MEASURED_S].sum()
    out[schema.SHARE] = out[schema.MEASURED_S] / total if total > 0 else np.nan
    order = {c: i for i, c in enumerate(schema.CATEGORIES)}
    out = out.sort_values(schema.CATEGORY, key=lambda s: s.map(order).fillna(99))
    return out.drop(columns=["_eff_meas", "_eff_pred"]).reset_index(drop=True)


def coverage(ops: pd.DataFrame) -> float:
    """Share of measured time spent in ops that some rule predicts (1.0 = all modeled)."""
    total = ops[schema.MEASURED_S].sum()
    if total <= 0:
        return float("nan")
    unmodeled = ops.loc[ops[schema.BOUND] == schema.UNMODELED, schema.MEASURED_S].sum()
    return float(1.0 - unmodeled / total)


def workload_efficiency(ops: pd.DataFrame, predicted: str = schema.PREDICTED_S,
                        measured: str = schema.MEASURED_S) -> float:
    """The workload's roofline efficiency: predicted over measured time of the modeled ops.

    The one definition every view prints (run summary, sweep summary, ``harness compare``'s
    step row, the pytest plugin). Unmodeled ops (no prediction) are left out of both sums;
    coverage says how much time that leaves out. So are async pairs measured as their waits
    but priced their whole transfers (``harness.analysis.async_pairs``). NaN when no modeled
    op took time. ``predicted``/``measured`` name the columns (``harness compare`` renames them).
    """
    modeled = ops[predicted].notna() & ~left_out(ops)
    t = float(ops.loc[modeled, measured].sum())
    return float(ops.loc[modeled, predicted].sum()) / t if t > 0 else float("nan")


def category_efficiency(ops: pd.DataFrame, category: str) -> float:
    """``workload_efficiency`` of the ops of one category (NaN when none took time)."""
    return workload_efficiency(ops[ops[schema.CATEGORY] == category])


def bus_gbps(bus_bytes: float | None, seconds: float | None) -> float:
    """Bus bandwidth in 1e9 bytes/s (nccl-tests' busbw): the bytes each device moves over links
    over the time they took; NaN without both."""
    ok = bus_bytes is not None and math.isfinite(bus_bytes) and seconds and seconds > 0
    return bus_bytes / seconds / 1e9 if ok else math.nan


def summary(ops: pd.DataFrame, *, step_s: float, peak_flops_per_s: float, devices: int,
            model_flops: float | None = None, analytic_s: float | None = None,
            bus_bytes: float | None = None) -> dict:
    """Workload-level figures for one step, keyed by ``schema`` names.

    ``step_s``: the step time MFU and HFU are over (``harness.analysis.tables``).
    ``peak_flops_per_s``: one device's peak. ``model_flops``: the step's useful FLOPs over
    all devices (e.g. 6·P·tokens for training, `transformers.md`);
    MFU = model_flops / (step_s · devices · peak), next to the hardware FLOPs utilisation from
    the HLO's own FLOPs (per device, counted per execution times count); a workload that does
    no model FLOPs (a collective) has no MFU. ``bus_bytes``: a collective's bytes per device
    over links: its bus bandwidth measured over the collective ops' time and the book's over
    ``analytic_s``.
    """
    hlo_flops = float((ops[schema.FLOPS].fillna(0.0) * ops[schema.COUNT]).sum())
    per_step = (lambda x: x / step_s if step_s > 0 else float("nan"))
    out = {
        schema.MEASURED_OPS_S: float(ops[schema.MEASURED_S].sum()),
        schema.PREDICTED_OPS_S: float(ops[schema.PREDICTED_S].fillna(0.0).sum()),
        schema.COVERAGE: coverage(ops),
        schema.EFFICIENCY: workload_efficiency(ops),
        schema.HLO_FLOPS_PER_DEVICE: hlo_flops,
        schema.HFU: per_step(hlo_flops / peak_flops_per_s),
        schema.DEVICES: devices,
    }
    if schema.WAIT_S in ops.columns:  # only where a -done was timed (TPU)
        out[schema.WAIT_S] = float(ops[schema.WAIT_S].sum())
    if model_flops:
        out[schema.MODEL_FLOPS] = model_flops
        out[schema.MFU] = per_step(model_flops / (devices * peak_flops_per_s))
    if analytic_s is not None:
        out[schema.ANALYTIC_S] = analytic_s
    if bus_bytes is not None and math.isfinite(bus_bytes):
        comm = ops.loc[ops[schema.CATEGORY] == schema.CAT_COLLECTIVE, schema.MEASURED_S].sum()
        out.update({schema.BUS_BYTES: bus_bytes,
                    schema.MEASURED_BUS_GBPS: bus_gbps(bus_bytes, float(comm)),
                    schema.PREDICTED_BUS_GBPS: bus_gbps(bus_bytes, analytic_s)})
    return out


# A roofline time is a lower bound (roofline.md), so an efficiency above 1 is impossible; above
# this margin it is more than timing noise: the chip's numbers are too low for the host. The run
# report (per op) and the sweep summary (per point) flag it with ``beats_roofline_reason``.
ROOFLINE_MARGIN = 1.10


def roof_limit(spread: float = math.nan) -> float:
    """The efficiency above which a figure beats its roofline: ``ROOFLINE_MARGIN``, or a CPU
    chip's spread where larger (how far the host's cores moved speed while it was calibrated,
    ``harness.chip.spells``: its rates are that uncertain; NaN or 0: none)."""
    return float(spread) if spread and spread > ROOFLINE_MARGIN else ROOFLINE_MARGIN


def beats_roofline(efficiency, spread: float = math.nan) -> bool:
    """True for an efficiency (or MFU) above ``roof_limit(spread)`` (NaN and None: False)."""
    try:
        return float(efficiency) > roof_limit(spread)
    except (TypeError, ValueError):
        return False


def within_spread(efficiency, spread: float = math.nan) -> bool:
    """True for an efficiency above ``ROOFLINE_MARGIN`` by no more than the chip's ``spread``:
    above the roof by less than the host moved while calibrating, so not shown as beating it
    (issue 50: a 2-core host whose cores moved 1.83x put matmuls at 127-166% of their roofs)."""
    try:
        return ROOFLINE_MARGIN < float(efficiency) <= roof_limit(spread)
    except (TypeError, ValueError):
        return False


# Why a CPU op can beat the calibrated cpu chip (docs/accuracy.md): its virtual devices
# are threads on shared cores, timed as host shares (harness.measure.shares), a thread waiting in
# a collective counts as running, and each matmul kernel's rate is calibrated on square matmuls
# of a few sizes with every device busy (harness.chip.rates), which other shapes, and a
# program on fewer devices, can outrun.
CPU_REASON = ("on CPU the virtual devices share the host's cores (a thread waiting in a "
              "collective counts as running) and each matmul kernel is calibrated on square "
              "matmuls with every device busy, which other shapes and programs on fewer devices "
              "can outrun; a calibration taken under load lowers the rates too (`harness "
              "calibrate` on a quiet host)")


def beats_roofline_reason(chip_name: str, kind: str, spread: float = math.nan) -> str:
    """Why a figure above ``roof_limit(spread)`` is wrong, for the chip it was predicted on."""
    beyond = " and the host's spread" if roof_limit(spread) > ROOFLINE_MARGIN else ""
    return (f"faster than the {chip_name} roofline allows (above "
            f"{roof_limit(spread):.0%}{beyond}): "
            + (CPU_REASON if kind == "cpu" else "the chip's numbers are too low"))


def ops_beating_roofline(ops: pd.DataFrame, min_share: float = 0.05,
                         spread: float = math.nan) -> str:
    """The ops, by name, that take a visible share of the step (``>= min_share``) and beat
    their roofline (``beats_roofline``; ``spread``: the chip's). Empty when there are none. A
    ``-done`` (``wait_s``) waits only for what other work did not hide of its transfer, so it
    is not counted."""
    fast = ops[(ops[schema.EFFICIENCY] > roof_limit(spread)) & (ops[schema.SHARE] >= min_share)]
    if schema.WAIT_S in fast.columns:
        fast = fast[fast[schema.WAIT_S].isna()]
    if fast.empty:
        return ""
    names = ", ".join(fast[schema.OP].head(3))
    return f"{len(fast)} op(s) ({names}{', ...' if len(fast) > 3 else ''})"


def peak_dtype(chip) -> str:
    """The dtype whose peak the summary quotes: fp32 on a host CPU, else bf16 where listed."""
    for dtype in (("fp32", "bf16") if chip.kind == "cpu" else ("bf16", "fp32")):
        try:
            if chip.flops_per_s(dtype) > 0:
                return dtype
        except (KeyError, ValueError):
            continue
    return "bf16"


# --- sharding check: collectives XLA inserted beyond what the layout calls for (`sharding.md`).
# A workload declares the collectives its sharding needs (e.g. case 2 of the sharding chapter:
# one AllGather). Any collective kind XLA ran more often than declared is listed with its cost,
# the first thing to look at when a layout is slow.
# HLO opcodes -> the collective they perform (async pairs are one collective; `-done` is free).
COLLECTIVE_KIND: dict[str, str] = {op: kind for c, kind in COLLECTIVE_OPCODES.items()
                                   for op in (c, f"{c}-start")}

UNEXPECTED_COLUMNS = (schema.OP, schema.OPCODE, "kind", "expected", "found", schema.MEASURED_S,
           schema.PREDICTED_S, schema.SHARE)


def collective_kind(opcode: str, collective: str = "") -> str:
    """The collective an op performs ("" for none); fusions wrapping one report it in
    ``collective``."""
    return COLLECTIVE_KIND.get(opcode, "") or (collective if collective in
                                                COLLECTIVE_KIND.values() else "")


def unexpected_collectives(ops: pd.DataFrame, expected: dict[str, int]) -> pd.DataFrame:
    """Ops of every collective kind found more often than ``expected`` allows, costliest first.

    Which of several same-kind ops is the extra one cannot be told apart, so all ops of an
    over-represented kind are listed, with the expected and found counts.
    """
    kinds = pd.Series([collective_kind(o, c) for o, c in
                       zip(ops[schema.OPCODE], ops.get(schema.COLLECTIVE, [""] * len(ops)))],
                      index=ops.index, dtype=object)
    found = kinds[kinds != ""].value_counts().to_dict()
    excess = {k for k, n in found.items() if n > expected.get(k, 0)}
    mask = kinds.isin(excess)
    extra = kinds[mask]
    rows = ops[mask].assign(kind=extra.values,
                            expected=[expected.get(k, 0) for k in extra],
                            found=[found[k] for k in extra])
    rows = rows.sort_values(schema.MEASURED_S, ascending=False)
    return rows[[c for c in UNEXPECTED_COLUMNS if c in rows.columns]].reset_index(drop=True)
