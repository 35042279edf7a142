"""Stragglers: the devices (or the processes of a multi-host run) the others wait for.

Per execution of a collective (``harness.measure.arrivals``), the unit that arrived last and by
how much: its arrival less the next-latest one's, the time its group waited for it alone (a
device one dispatch behind the others costs the group that dispatch, not the whole spread). A
unit is named a straggler when, as xprof's straggler analysis and HTA's per-rank view read it:

- it is the step's latest (the most time arrived last) in most steps;
- its lateness per step (median over steps) is 5% or more of the step's period;
- with three or more units, its lateness stands out by a robust z-score (median absolute
  deviation, 0.6745 (x - median) / MAD) of 3.5 or more.

Across hosts, clocks differ: they are aligned on the collectives' ends
(``harness.measure.per_host.clock_offsets``), which every device of an execution leaves
together, before arrivals are compared.

Devices of one host are compared on the time they took to arrive from their own start of the
step (``starts``: each device's first op in it): one host launches its devices' executions one
after the other, so on a CPU host of 8 device threads the last launched arrives last every step
by the launch order alone, which is the host's dispatch (``harness.step.waits``), not a device
slower than the rest. A process of a multi-host run that starts late is late: processes are
compared on their arrivals.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.per_host import clock_offsets

Z_LIMIT = 3.5         # xprof's straggler z-score
MIN_COST = 0.05       # of the period
MIN_UNITS_FOR_Z = 3   # a z-score over fewer units says nothing
_KEY = [schema.PROGRAM, schema.OP, schema.STEP, schema.EXECUTION]
_NS = 1e-9


def _launched(arr: pd.DataFrame, starts: pd.Series | None) -> np.ndarray:
    """Per arrival, ns its device started the step after the first device of its host did
    (0 where ``starts``, ns by (step, device), does not say)."""
    if starts is None or starts.empty:
        return np.zeros(len(arr), np.int64)
    first = starts.groupby(level=0).min()
    late = (starts - first.reindex(starts.index.get_level_values(0)).to_numpy())
    key = pd.MultiIndex.from_arrays([arr[schema.STEP], arr[schema.DEVICE]])
    return late.reindex(key).fillna(0).to_numpy(np.int64)


def leads(arr: pd.DataFrame, offsets: dict[int, int], unit: str,
          starts: pd.Series | None = None) -> pd.DataFrame:
    """Per execution (and group): the unit (``schema.DEVICE`` or ``schema.HOST``) that arrived
    last, by how much before the next-latest (``lead_ns``) and the op; devices by the time
    they took from their own start (``starts``, module docstring)."""
    off = arr[schema.HOST].map(lambda h: offsets.get(int(h), 0)).to_numpy(np.int64)
    if unit == schema.DEVICE:
        off = off - _launched(arr, starts)
    a = arr.assign(_t=arr[schema.ARRIVE_NS].to_numpy(np.int64) + off,
                   _g=arr[schema.LAST_ARRIVE_NS].to_numpy(np.int64) + off)
    # a group's devices share their aligned last arrival: it tells groups of one execution apart
    per = a.groupby([*_KEY, "_g", unit], observed=True)["_t"].max().reset_index()
    per = per.sort_values([*_KEY, "_g", "_t"], kind="stable")
    g = per.groupby([*_KEY, "_g"], observed=True, sort=False)
    n = g["_t"].transform("size")
    second = g["_t"].transform(lambda t: t.iloc[-2] if len(t) > 1 else t.iloc[-1])
    last = per[(g.cumcount(ascending=False) == 0) & (n > 1)]
    return pd.DataFrame({schema.STEP: last[schema.STEP], schema.OP: last[schema.OP],
                         "unit": last[unit], "lead_ns": (last["_t"] - second[last.index])})


def stragglers(arr: pd.DataFrame, period_s: float, offsets: dict[int, int] | None = None,
               starts: pd.Series | None = None) -> list[dict]:
    """The stragglers (module docstring) of an ARRIVALS table: processes where it holds
    several hosts, else devices; ``period_s``: the step's period (median); ``starts``: each
    device's first op of each step, ns by (step, device)."""
    if arr.empty or period_s <= 0:
        return []
    unit = schema.HOST if arr[schema.HOST].nunique() > 1 else schema.DEVICE
    offsets = offsets if offsets is not None else clock_offsets(arr)
    lead = leads(arr, offsets, unit, starts)
    units = sorted(arr[unit].unique().tolist())
    steps = sorted(arr[schema.STEP].unique().tolist())
    if lead.empty or len(units) < 2:
        return []
    late = (lead.groupby([schema.STEP, "unit"])["lead_ns"].sum().unstack("unit")
            .reindex(index=steps, columns=units).fillna(0) * _NS)
    latest = late.idxmax(axis=1)[late.max(axis=1) > 0]
    cost = late.median(axis=0)
    med = float(np.median(cost))
    mad = float(np.median(np.abs(cost - med)))
    out = []
    for u in units:
        share = float((latest == u).sum() / len(steps))
        z = 0.6745 * (cost[u] - med) / mad if mad > 0 else (np.inf if cost[u] > med else 0.0)
        if share <= 0.5 or cost[u] < MIN_COST * period_s:
            continue
        if len(units) >= MIN_UNITS_FOR_Z and z < Z_LIMIT:
            continue
        mine = lead[lead["unit"] == u]
        top = mine.groupby(schema.OP)["lead_ns"].sum().idxmax()
        out.append({schema.STRAGGLER_UNIT: "process" if unit == schema.HOST else "device",
                    schema.STRAGGLER_ID: int(u), schema.OP: str(top),
                    schema.LATE_S: float(cost[u]), schema.LAST_SHARE: share})
    return out


def last_by_op(arr: pd.DataFrame, offsets: dict[int, int] | None = None) -> dict[str, dict]:
    """Per collective op: the unit (device, or process of several hosts) that arrived last
    most often (``STRAGGLER_UNIT``/``STRAGGLER_ID``), the share of its executions it did
    (``LAST_SHARE``) and its median lead over the next-latest then (``LATE_S``)."""
    if arr.empty:
        return {}
    unit = schema.HOST if arr[schema.HOST].nunique() > 1 else schema.DEVICE
    lead = leads(arr, offsets if offsets is not None else clock_offsets(arr), unit)
    out = {}
    for op, g in lead.groupby(schema.OP, sort=False):
        counts = g["unit"].value_counts()
        u = counts.index[0]
        out[str(op)] = {schema.STRAGGLER_UNIT: "process" if unit == schema.HOST else "device",
                        schema.STRAGGLER_ID: int(u),
                        schema.LAST_SHARE: float(counts.iloc[0] / len(g)),
                        schema.LATE_S: float(g.loc[g["unit"] == u, "lead_ns"].median() * _NS)}
    return out
