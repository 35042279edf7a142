"""EVENTS -> OPS[measured]: per (program, program id, op), executions per step and time per step.

Time per step of an op on a device is the sum of its executions in that step. ``measured_s`` is
the median over steps of that sum, per device, then the median over devices; the min and max
over devices are kept so that skew between devices stays visible. Ops of a host whose devices
share cores (``harness.measure.shares``) take the mean over devices of their ``host_ns`` instead
(``shares=True``): their shares of the host, which the mean conserves, but for short executions
that ran beside idle cores. ``total_s`` is the op's device time over
the whole trace, every device and execution summed (xprof's ``hlo_stats`` total self time).

A trace without step markers has no steps: ``by_execution`` makes each execution of a program
one step, so that ``measured_s`` is per execution (the median over them).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.grouping import exact_sums, groups, runs

_NS = 1e-9


def named(column: pd.Series, names: set[str]) -> np.ndarray:
    """Whether each value of ``column`` (an op or program name) is one of ``names``; a
    categorical's categories are compared once each, not once per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        hit = np.append(column.cat.categories.astype(str).isin(names), False)  # -1: missing
        return hit[column.cat.codes.to_numpy()]
    return column.astype(str).isin(names).to_numpy()


def as_text(column: pd.Series) -> pd.Series:
    """``column.astype(str)``; a categorical's categories converted once and taken by code,
    not each row converted (millions of rows)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        if not len(codes) or codes.min() >= 0:  # a missing value: as astype gives it
            names = column.cat.categories.astype(str).take(codes)
            return pd.Series(names, index=column.index, name=column.name)
    return column.astype(str)


def keys(events: pd.DataFrame) -> list[str]:
    """The columns naming one op: program, program id where the table has it, op."""
    return [schema.PROGRAM, *([schema.PROGRAM_ID] if schema.PROGRAM_ID in events.columns
                              else []), schema.OP]


def _per_device_step(events: pd.DataFrame, time: str = schema.DURATION_NS) -> pd.DataFrame:
    """Per (op, device, step), sorted by them: the keys, the ``sum`` of ``time`` and the
    number of executions (``size``), as pandas' ``groupby(...).agg(["sum", "size"])`` gives
    them; the groups numbered by ``groups`` and summed by ``np.bincount``."""
    schema.validate(events, schema.EVENTS, where="op_times(events)")
    by = [*keys(events), schema.DEVICE, schema.STEP]
    t = events[time].to_numpy(np.int64)
    found = groups(events, by)
    if found is None or not exact_sums(t):
        return events.groupby(by, observed=True)[time].agg(["sum", "size"]).reset_index()
    group, first = found
    total = np.bincount(group, weights=t, minlength=len(first)).astype(np.int64)
    size = np.bincount(group, minlength=len(first))
    return events[by].take(first).reset_index(drop=True).assign(sum=total, size=size)


def _timing(shares: bool) -> tuple[str, str]:
    """(time column, aggregate over devices): a host's ops (``harness.measure.shares``) are timed
    by ``host_ns`` and averaged, which is what shares conserve; durations by their median."""
    return (schema.HOST_NS, "mean") if shares else (schema.DURATION_NS, "median")


def _as_str(df: pd.DataFrame, columns) -> pd.DataFrame:
    for col in columns:
        if col in df.columns:
            df[col] = as_text(df[col])
    return df


def op_sums(events: pd.DataFrame, shares: bool = False) -> pd.DataFrame:
    """Per (op, device, step) of EVENTS, sorted by them: the keys, ``sum`` (the op's time
    there: ``host_ns`` where ``shares``, else ``duration_ns``) and ``size`` (its executions
    there). ``op_times``, ``step_samples`` and ``executions`` start from it: a caller that
    asks for more than one makes it once and gives it to each (``sums``)."""
    return _per_device_step(events, _timing(shares)[0])


def _per_device(sums: pd.DataFrame, op: list[str], medians: bool = True) -> pd.DataFrame:
    """Per (op, device) of ``op_sums``: the keys, ``k`` (the op's executions in all) and, with
    ``medians``, ``t`` and ``n`` (the medians over steps of its time and executions per step):
    pandas' medians over one integer key (the run of rows each group is), not over the keys;
    ``n`` needs none where each group runs its op as often in every step (most traces)."""
    by = [*op, schema.DEVICE]
    group, first = runs(sums, by)
    size = sums["size"].to_numpy()
    out = sums[by].take(first).reset_index(drop=True)
    if not len(first):
        return out.assign(k=size[:0], t=np.zeros(0), n=np.zeros(0))
    out["k"] = np.add.reduceat(size, first)
    if medians:
        low = np.minimum.reduceat(size, first)
        same = bool((low == np.maximum.reduceat(size, first)).all())
        m = pd.DataFrame({"t": sums["sum"].to_numpy(), **({} if same else {"n": size})}
                         ).groupby(group).median()
        out["t"] = m["t"].to_numpy()
        out["n"] = low.astype(np.float64) if same else m["n"].to_numpy()
    return out


def op_times(events: pd.DataFrame, shares: bool = False,
             sums: pd.DataFrame | None = None) -> pd.DataFrame:
    """The measured OPS table, sorted by ``measured_s`` descending. ``shares``: time each op by
    its time on the host (``host_ns``, ``harness.measure.shares.host_shares``), mean over devices.
    ``sums``: ``op_sums(events, shares)``, where the caller made it."""
    time, over_devices = _timing(shares)
    op = keys(events)
    per_device = _per_device(op_sums(events, shares) if sums is None else sums, op)
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
    out = out.merge(_total_s(events, op), on=op, how="left")
    out = _as_str(out, op)
    out = out.sort_values(schema.MEASURED_S, ascending=False, kind="stable")
    ids = [schema.PROGRAM_ID] if schema.PROGRAM_ID in op else []
    return out[[*schema.OPS_MEASURED, *ids, schema.TOTAL_S]].reset_index(drop=True)


def _total_s(events: pd.DataFrame, op: list[str]) -> pd.DataFrame:
    """Per op: its device time over the whole trace (``total_s``), every execution summed."""
    t = events[schema.DURATION_NS].to_numpy(np.int64)
    found = groups(events, op)
    if found is None or not exact_sums(t):
        total = events.groupby(op, observed=True)[schema.DURATION_NS].sum().mul(_NS)
        return total.rename(schema.TOTAL_S).reset_index()
    group, first = found
    ns = np.bincount(group, weights=t)
    return events[op].take(first).reset_index(drop=True).assign(
        **{schema.TOTAL_S: ns.astype(np.int64) * _NS})


def step_samples(events: pd.DataFrame, shares: bool = False,
                 sums: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (program, op, step): the op's time in that step, median over devices (``shares``:
    its shares' mean) in seconds. ``sums``: ``op_sums(events, shares)``, where the caller
    made it.

    The per-step distribution behind ``measured_s``; regression checks test on it.
    """
    over_devices = _timing(shares)[1]
    op = keys(events)
    per_step = op_sums(events, shares) if sums is None else sums
    by = [*op, schema.STEP]
    found = (groups(per_step, by) if over_devices == "mean" and exact_sums(
        per_step["sum"].to_numpy()) else None)
    if found is None:
        out = (per_step.groupby(by, observed=True)["sum"]
               .agg(over_devices).mul(_NS).rename(schema.MEASURED_S).reset_index())
    else:  # a mean: sums and counts by np.bincount (exact: the sums are of integers)
        group, first = found
        total = np.bincount(group, weights=per_step["sum"].to_numpy(np.float64))
        mean = total / np.bincount(group)
        out = per_step[by].take(first).reset_index(drop=True).assign(
            **{schema.MEASURED_S: mean * _NS})
    return _as_str(out, op)


def step_time(events: pd.DataFrame) -> float:
    """Median over steps of the busiest device's summed op time in that step (seconds)."""
    schema.validate(events, schema.EVENTS, where="step_time(events)")
    t = events[schema.DURATION_NS].to_numpy(np.int64)
    found = groups(events, [schema.STEP, schema.DEVICE]) if exact_sums(t) else None
    if found is None:
        per_step = _per_device_step(events)
        busy = per_step.groupby([schema.STEP, schema.DEVICE], observed=True)["sum"].sum()
        return float(busy.groupby(level=0).max().median() * _NS)
    # a device's time in a step: its ops' executions there, summed (the sum of its ops' sums)
    group, first = found
    busy = np.bincount(group, weights=t)
    step = events[schema.STEP].to_numpy()[first]
    steps, at = np.unique(step, return_inverse=True)
    busiest = np.full(len(steps), -np.inf)
    np.maximum.at(busiest, at, busy)
    return float(np.median(busiest) * _NS)


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
    op = as_text(ev[schema.OP])
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


def executions(events: pd.DataFrame, per_execution: Mapping[str, int] | None = None,
               sums: pd.DataFrame | None = None) -> int:
    """How many times ONE program ran on each device (the median over devices): per op,
    occurrences over its executions per run (``per_execution``, from the HLO), the median over
    ops; ops the HLO does not count vote with the most common occurrence count. ``sums``:
    ``op_sums(events)``, where the caller made it (its ``size`` counts the occurrences)."""
    if events.empty:
        return 0
    if sums is None:
        per = (events.groupby([schema.DEVICE, schema.OP], observed=True).size()
               .rename("k").reset_index())
    else:
        per = _per_device(sums, keys(sums), medians=False)[[schema.DEVICE, schema.OP, "k"]]
    per = per[per["k"] > 0]
    per["n"] = per[schema.OP].astype(str).map(dict(per_execution or {}))
    counted = per.dropna(subset=["n"])
    counted = counted[counted["n"] >= 1]
    if len(counted):
        runs = (counted["k"] / counted["n"]).groupby(counted[schema.DEVICE]).median()
    else:
        runs = per.groupby(schema.DEVICE)["k"].agg(lambda k: k.mode().max())
    return int(round(float(runs.median())))
