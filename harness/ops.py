"""EVENTS -> OPS[measured]: per (program, program id, op), executions per step and time per step.

Time per step of an op on a device is the sum of its executions in that step. ``measured_s`` is
the median over steps of that sum, per device, then the median over devices; the min and max
over devices are kept so that skew between devices stays visible. Shares of a host whose
devices share cores (``harness.shares``) take the mean over devices of their ``share_ns``
instead (``shares=True``): it is what they conserve. ``total_s`` is the op's device time over
the whole trace, every device and execution summed (xprof's ``hlo_stats`` total self time).

A trace without step markers has no steps: ``by_execution`` makes each execution of a program
one step, so that ``measured_s`` is per execution (the median over them).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from harness import schema

_NS = 1e-9


def keys(events: pd.DataFrame) -> list[str]:
    """The columns naming one op: program, program id where the table has it, op."""
    return [schema.PROGRAM, *([schema.PROGRAM_ID] if schema.PROGRAM_ID in events.columns
                              else []), schema.OP]


def _per_device_step(events: pd.DataFrame, time: str = schema.DURATION_NS) -> pd.DataFrame:
    schema.validate(events, schema.EVENTS, where="op_times(events)")
    by = [*keys(events), schema.DEVICE, schema.STEP]
    return (events.groupby(by, observed=True, sort=False)[time]
            .agg(["sum", "size"]).reset_index())


def _timing(shares: bool) -> tuple[str, str]:
    """(time column, aggregate over devices): a host's shares (``harness.shares``) are timed
    by ``share_ns`` and averaged, which is what they conserve; durations by their median."""
    return (schema.SHARE_NS, "mean") if shares else (schema.DURATION_NS, "median")


def _as_str(df: pd.DataFrame, columns) -> pd.DataFrame:
    for col in columns:
        if col in df.columns:
            df[col] = df[col].astype(str)
    return df


def op_times(events: pd.DataFrame, shares: bool = False) -> pd.DataFrame:
    """The measured OPS table, sorted by ``measured_s`` descending. ``shares``: time each op by
    its share of the host (``share_ns``, ``harness.shares.host_shares``), mean over devices."""
    time, over_devices = _timing(shares)
    op = keys(events)
    per_step = _per_device_step(events, time)
    per_device = (per_step.groupby([*op, schema.DEVICE], observed=True)
                  .agg(t=("sum", "median"), n=("size", "median")).reset_index())
    grouped = per_device.groupby(op, observed=True)
    out = grouped.agg(**{
        schema.COUNT: ("n", "median"),
        schema.MEASURED_S: ("t", over_devices),
        schema.MEASURED_MIN_S: ("t", "min"),
        schema.MEASURED_MAX_S: ("t", "max"),
        schema.DEVICES: (schema.DEVICE, "nunique"),
    }).reset_index()
    for col in (schema.MEASURED_S, schema.MEASURED_MIN_S, schema.MEASURED_MAX_S):
        out[col] = out[col] * _NS
    total = events.groupby(op, observed=True)[schema.DURATION_NS].sum().mul(_NS)
    out = out.merge(total.rename(schema.TOTAL_S).reset_index(), on=op, how="left")
    out = _as_str(out, op)
    out = out.sort_values(schema.MEASURED_S, ascending=False, kind="stable")
    ids = [schema.PROGRAM_ID] if schema.PROGRAM_ID in op else []
    return out[[*schema.OPS_MEASURED, *ids, schema.TOTAL_S]].reset_index(drop=True)


def step_samples(events: pd.DataFrame, shares: bool = False) -> pd.DataFrame:
    """Per (program, op, step): the op's time in that step, median over devices (``shares``:
    its shares' mean) in seconds.

    The per-step distribution behind ``measured_s``; regression checks test on it.
    """
    time, over_devices = _timing(shares)
    op = keys(events)
    per_step = _per_device_step(events, time)
    out = (per_step.groupby([*op, schema.STEP], observed=True)["sum"]
           .agg(over_devices).mul(_NS).rename(schema.MEASURED_S).reset_index())
    return _as_str(out, op)


def step_time(events: pd.DataFrame) -> float:
    """Median over steps of the busiest device's summed op time in that step (seconds)."""
    per_step = _per_device_step(events)
    busy = per_step.groupby([schema.STEP, schema.DEVICE], observed=True)["sum"].sum()
    return float(busy.groupby(level=0).max().median() * _NS)


def by_execution(events: pd.DataFrame, per_execution: Mapping[str, int] | None = None
                 ) -> pd.DataFrame:
    """EVENTS of ONE program from a trace without step markers, each execution made a step.

    On each device, an op's k-th occurrence (in time order) belongs to execution
    k // n, n its executions per program run: ``per_execution[op]`` (from the program's HLO,
    loop trip counts included), else its occurrences over the program's executions, which are
    the most common number of occurrences among its ops (most ops run once per execution).
    That numbering shifts every later execution of an op whose event the profiler dropped once,
    so it only finds the program's first op: the op that runs once per execution and most often
    opens one. Each of its occurrences then opens an execution on its device, and every event
    belongs to the last one opened at or before its start (those before the first, to the
    first): a dropped event leaves one execution short of it instead of shifting the others.
    """
    if events.empty:
        return events
    ev = events.sort_values(schema.START_NS, kind="stable")
    op = ev[schema.OP].astype(str)
    by = [ev[schema.DEVICE], op]
    rank = ev.groupby(by, observed=True, sort=False).cumcount().to_numpy()
    occurrences = ev.groupby(by, observed=True, sort=False)[schema.OP].transform("size")
    n = np.array(op.map(dict(per_execution or {})), dtype=float)
    unknown = np.isnan(n) | (n < 1)
    if unknown.any():
        runs = executions(ev, per_execution)
        n[unknown] = np.maximum(np.asarray(occurrences)[unknown] // max(runs, 1), 1)
    step = (rank // n).astype(np.int64)
    anchor = _first_op(ev, op, step, n)
    if anchor is not None:
        opens = (op == anchor).to_numpy().astype(np.int64)
        step = np.maximum(pd.Series(opens, index=ev.index).groupby(
            ev[schema.DEVICE].to_numpy()).cumsum().to_numpy() - 1, 0)
    return ev.assign(**{schema.STEP: step.astype(np.int32)}).sort_index()


def _first_op(ev: pd.DataFrame, op: pd.Series, step: np.ndarray, n: np.ndarray) -> str | None:
    """The op that runs once per execution and most often starts one (on its device, by the
    numbering ``step``), or None where no op runs once per execution."""
    once = n == 1
    if not once.any():
        return None
    key = pd.DataFrame({"d": ev[schema.DEVICE].to_numpy(), "k": step, "op": op.to_numpy(),
                        "once": once})
    first = key.drop_duplicates(["d", "k"])  # ev is in time order: each execution's first op
    first = first[first["once"]]
    return str(first["op"].mode().iloc[0]) if len(first) else None


def executions(events: pd.DataFrame, per_execution: Mapping[str, int] | None = None) -> int:
    """How many times ONE program ran on each device (the median over devices): per op,
    occurrences over its executions per run (``per_execution``, from the HLO), the median over
    ops; ops the HLO does not count vote with the most common occurrence count."""
    if events.empty:
        return 0
    per = (events.groupby([schema.DEVICE, schema.OP], observed=True).size()
           .rename("k").reset_index())
    per = per[per["k"] > 0]
    per["n"] = per[schema.OP].astype(str).map(dict(per_execution or {}))
    counted = per.dropna(subset=["n"])
    counted = counted[counted["n"] >= 1]
    if len(counted):
        runs = (counted["k"] / counted["n"]).groupby(counted[schema.DEVICE]).median()
    else:
        runs = per.groupby(schema.DEVICE)["k"].agg(lambda k: k.mode().max())
    return int(round(float(runs.median())))
