"""EVENTS -> OPS[measured]: per (program, op), executions per step and time per step.

Time per step of an op on a device is the sum of its executions in that step. ``measured_s`` is
the median over steps of that sum, per device, then the median over devices; the min and max
over devices are kept so that skew between devices stays visible. Shares of a host whose
devices share cores (``harness.shares``) take the mean over devices instead (``mean=True``): it
is what they conserve.
"""
from __future__ import annotations

import pandas as pd

from harness import schema

_NS = 1e-9


def _per_device_step(events: pd.DataFrame) -> pd.DataFrame:
    schema.validate(events, schema.EVENTS, where="op_times(events)")
    keys = [schema.PROGRAM, schema.OP, schema.DEVICE, schema.STEP]
    return (events.groupby(keys, observed=True, sort=False)[schema.DURATION_NS]
            .agg(["sum", "size"]).reset_index())


def _over_devices(mean: bool) -> str:
    return "mean" if mean else "median"


def op_times(events: pd.DataFrame, mean: bool = False) -> pd.DataFrame:
    """The measured OPS table, sorted by ``measured_s`` descending. ``mean``: over devices."""
    per_step = _per_device_step(events)
    per_device = (per_step.groupby([schema.PROGRAM, schema.OP, schema.DEVICE], observed=True)
                  .agg(t=("sum", "median"), n=("size", "median")).reset_index())
    grouped = per_device.groupby([schema.PROGRAM, schema.OP], observed=True)
    out = grouped.agg(**{
        schema.COUNT: ("n", "median"),
        schema.MEASURED_S: ("t", _over_devices(mean)),
        schema.MEASURED_MIN_S: ("t", "min"),
        schema.MEASURED_MAX_S: ("t", "max"),
        schema.DEVICES: (schema.DEVICE, "nunique"),
    }).reset_index()
    for col in (schema.MEASURED_S, schema.MEASURED_MIN_S, schema.MEASURED_MAX_S):
        out[col] = out[col] * _NS
    out[schema.PROGRAM] = out[schema.PROGRAM].astype(str)
    out[schema.OP] = out[schema.OP].astype(str)
    out = out.sort_values(schema.MEASURED_S, ascending=False, kind="stable")
    return out[list(schema.OPS_MEASURED)].reset_index(drop=True)


def step_samples(events: pd.DataFrame, mean: bool = False) -> pd.DataFrame:
    """Per (program, op, step): the op's time in that step, median (``mean``: mean) over
    devices (seconds).

    The per-step distribution behind ``measured_s``; regression checks test on it.
    """
    per_step = _per_device_step(events)
    out = (per_step.groupby([schema.PROGRAM, schema.OP, schema.STEP], observed=True)["sum"]
           .agg(_over_devices(mean)).mul(_NS).rename(schema.MEASURED_S).reset_index())
    out[schema.PROGRAM] = out[schema.PROGRAM].astype(str)
    out[schema.OP] = out[schema.OP].astype(str)
    return out


def step_time(events: pd.DataFrame) -> float:
    """Median over steps of the busiest device's summed op time in that step (seconds)."""
    per_step = _per_device_step(events)
    busy = per_step.groupby([schema.STEP, schema.DEVICE], observed=True)["sum"].sum()
    return float(busy.groupby(level=0).max().median() * _NS)
