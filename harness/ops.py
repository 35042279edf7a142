"""EVENTS -> OPS[measured]: per (program, op), executions per step and time per step.

Time per step of an op on a device is the sum of its executions in that step. ``measured_s`` is
the median over steps of that sum, per device, then the median over devices; the min and max
over devices are kept so that skew between devices stays visible. Shares of a host whose
devices share cores (``harness.shares``) take the mean over devices of their ``share_ns``
instead (``shares=True``): it is what they conserve.
"""
from __future__ import annotations

import pandas as pd

from harness import schema

_NS = 1e-9


def _per_device_step(events: pd.DataFrame, time: str = schema.DURATION_NS) -> pd.DataFrame:
    schema.validate(events, schema.EVENTS, where="op_times(events)")
    keys = [schema.PROGRAM, schema.OP, schema.DEVICE, schema.STEP]
    return (events.groupby(keys, observed=True, sort=False)[time]
            .agg(["sum", "size"]).reset_index())


def _timing(shares: bool) -> tuple[str, str]:
    """(time column, aggregate over devices): a host's shares (``harness.shares``) are timed
    by ``share_ns`` and averaged, which is what they conserve; durations by their median."""
    return (schema.SHARE_NS, "mean") if shares else (schema.DURATION_NS, "median")


def op_times(events: pd.DataFrame, shares: bool = False) -> pd.DataFrame:
    """The measured OPS table, sorted by ``measured_s`` descending. ``shares``: time each op by
    its share of the host (``share_ns``, ``harness.shares.host_shares``), mean over devices."""
    time, over_devices = _timing(shares)
    per_step = _per_device_step(events, time)
    per_device = (per_step.groupby([schema.PROGRAM, schema.OP, schema.DEVICE], observed=True)
                  .agg(t=("sum", "median"), n=("size", "median")).reset_index())
    grouped = per_device.groupby([schema.PROGRAM, schema.OP], observed=True)
    out = grouped.agg(**{
        schema.COUNT: ("n", "median"),
        schema.MEASURED_S: ("t", over_devices),
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


def step_samples(events: pd.DataFrame, shares: bool = False) -> pd.DataFrame:
    """Per (program, op, step): the op's time in that step, median over devices (``shares``:
    its shares' mean) in seconds.

    The per-step distribution behind ``measured_s``; regression checks test on it.
    """
    time, over_devices = _timing(shares)
    per_step = _per_device_step(events, time)
    out = (per_step.groupby([schema.PROGRAM, schema.OP, schema.STEP], observed=True)["sum"]
           .agg(over_devices).mul(_NS).rename(schema.MEASURED_S).reset_index())
    out[schema.PROGRAM] = out[schema.PROGRAM].astype(str)
    out[schema.OP] = out[schema.OP].astype(str)
    return out


def step_time(events: pd.DataFrame) -> float:
    """Median over steps of the busiest device's summed op time in that step (seconds)."""
    per_step = _per_device_step(events)
    busy = per_step.groupby([schema.STEP, schema.DEVICE], observed=True)["sum"].sum()
    return float(busy.groupby(level=0).max().median() * _NS)
