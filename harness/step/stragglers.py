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
from harness.measure.arrivals import host_offsets, sorted_codes
from harness.measure.per_host import clock_offsets
from harness.step import runs

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
    they took from their own start (``starts``, module docstring). In the order of the
    executions' keys (program, op, step, execution, group), indexed by the place of the unit's
    row in the table of every unit's arrival at every execution, sorted by those keys and
    unit."""
    clock = host_offsets(arr[schema.HOST], offsets)  # the hosts' clocks aligned
    off = clock - _launched(arr, starts) if unit == schema.DEVICE else clock
    t = arr[schema.ARRIVE_NS].to_numpy(np.int64) + off
    # a group's devices share their last arrival on aligned clocks: it tells groups of one
    # execution apart (each device's own launch shift times its arrival, not its group's)
    g = arr[schema.LAST_ARRIVE_NS].to_numpy(np.int64) + clock
    key, missing = zip(*(sorted_codes(arr[c]) for c in _KEY))
    keep = ~np.any(missing, axis=0)  # a missing key: no execution (as groupby drops it)
    rows = np.flatnonzero(keep)
    key = [k[keep] for k in [*key, g]]
    u, t = arr[unit].to_numpy(np.int64)[keep], t[keep]
    rows, group, t = _per_unit(rows, key, u, t)
    # each execution's units in arrival order (ties: by unit): its last two, the latest two
    order = runs.order(group, t)
    pick, lead = _last_of_groups(group[order], t[order])
    at = rows[order[pick]]
    return pd.DataFrame({schema.STEP: arr[schema.STEP].array[at],
                         schema.OP: arr[schema.OP].array[at],
                         "unit": arr[unit].array[at], "lead_ns": lead},
                        index=pd.Index(order[pick], dtype=np.int64))


def _per_unit(rows: np.ndarray, key: list[np.ndarray], u: np.ndarray, t: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each unit's latest arrival at each execution (``key``: its key columns as sortable
    codes; ``u``: the unit; ``t``: aligned arrivals), sorted by execution and unit: one of its
    ``rows``, the execution's number in that order and the arrival."""
    order = runs.order(*key, u, t)
    key = [k[order] for k in key]
    new = runs.starts(*key)  # a new execution
    last = np.append(runs.starts(*key, u[order])[1:], True)  # a unit's last row: its latest
    return rows[order[last]], np.cumsum(new)[last], t[order[last]]


def _last_of_groups(group: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of units' arrivals (each execution's together, ``group``, in arrival order ``t``): the
    place of each execution's last, where it has two or more units, and its lead over the one
    before it (the next-latest)."""
    same = group[1:] == group[:-1]  # the next row is of the same execution
    last = np.append(~same, True)
    paired = np.insert(same, 0, False)  # an earlier row: two or more units
    pick = np.flatnonzero(last & paired)
    return pick, t[pick] - t[pick - 1]


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
    # per step and unit: its leads summed (s), 0 where it was never last
    late = (lead.groupby([schema.STEP, "unit"])["lead_ns"].sum().unstack("unit")
            .reindex(index=steps, columns=units).fillna(0) * _NS)
    latest = late.idxmax(axis=1)[late.max(axis=1) > 0]  # each step's latest unit
    cost = late.median(axis=0)  # a unit's lateness per step
    med = float(np.median(cost))
    mad = float(np.median(np.abs(cost - med)))
    share = latest.value_counts().reindex(units, fill_value=0).to_numpy() / len(steps)
    c = cost.to_numpy()
    z = (0.6745 * (c - med) / mad if mad > 0
         else np.where(c > med, np.inf, 0.0))  # robust z-score of each unit's cost
    named = (share > 0.5) & (c >= MIN_COST * period_s)
    if len(units) >= MIN_UNITS_FOR_Z:
        named &= z >= Z_LIMIT
    kind = "process" if unit == schema.HOST else "device"
    out = []
    for i in np.flatnonzero(named):
        mine = lead[lead["unit"] == units[i]]  # the op it kept the others waiting at most
        top = mine.groupby(schema.OP)["lead_ns"].sum().idxmax()
        out.append({schema.STRAGGLER_UNIT: kind, schema.STRAGGLER_ID: int(units[i]),
                    schema.OP: str(top), schema.LATE_S: float(c[i]),
                    schema.LAST_SHARE: float(share[i])})
    return out


def last_by_op(arr: pd.DataFrame, offsets: dict[int, int] | None = None) -> dict[str, dict]:
    """Per collective op: the unit (device, or process of several hosts) that arrived last
    most often (``STRAGGLER_UNIT``/``STRAGGLER_ID``), the share of its executions it did
    (``LAST_SHARE``) and its median lead over the next-latest then (``LATE_S``)."""
    if arr.empty:
        return {}
    unit = schema.HOST if arr[schema.HOST].nunique() > 1 else schema.DEVICE
    lead = leads(arr, offsets if offsets is not None else clock_offsets(arr), unit)
    kind = "process" if unit == schema.HOST else "device"
    out = {}
    for op, u, count, n, late in _most_often_last(lead).itertuples(index=False):
        out[str(op)] = {schema.STRAGGLER_UNIT: kind, schema.STRAGGLER_ID: int(u),
                        schema.LAST_SHARE: float(count / n), schema.LATE_S: float(late * _NS)}
    return out


def _most_often_last(lead: pd.DataFrame) -> pd.DataFrame:
    """Per op of ``leads`` (in order of first appearance): the unit last most often (ties: the
    first of them to appear), its count, the op's executions and its median lead then."""
    by = lead.groupby([schema.OP, "unit"], observed=True, sort=False)["lead_ns"]
    # (op, unit) pairs in order of first appearance: within an op, its units' first appearance
    per = pd.DataFrame({"count": by.size(), "late": by.median()}).reset_index()
    ops = per.groupby(schema.OP, observed=True, sort=False)
    per["n"] = ops["count"].transform("sum")
    per["first"] = ops.ngroup()  # the op's place in order of first appearance
    # the most often last of each op: a stable sort by count, descending, keeps ties in order
    top = per.sort_values("count", ascending=False, kind="stable").drop_duplicates(schema.OP)
    return top.sort_values("first")[[schema.OP, "unit", "count", "n", "late"]]
