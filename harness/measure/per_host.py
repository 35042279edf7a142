"""Per-host columns of a job's ops (``harness.multihost.run``, ``harness trace`` of several hosts'
traces): every process's EVENTS, whose ``schema.HOST`` column names the process each row came from.

- ``host_columns``: per op, the spread of its time over hosts (``schema.OPS_HOSTS``): a host's
  ``measured_s`` is the median over its devices, as ``ops.op_times`` defines it for one host;
  ``with_host_columns``: a run's ops with them, and a note naming the op of largest skew;
- ``by_device``: per op and device, the device's median time over steps (``by_device.csv``);
- ``clock_offsets``: the hosts' clocks aligned on the collectives' ends, which every device of
  an execution leaves together (``harness.measure.arrivals`` compares arrivals on them; a late
  process is named by ``harness.step.stragglers``).

A collective's time on a host counts from its group's last arrival (``from_last_arrival``): the
host that arrived first waits in it the longest, and without that its skew would name the host
that waited as the slowest, not the one that was late (nsys-jax reads bus bandwidth from the
fastest device for the same reason).

``harness.multihost.store`` analyses and stores the merged run.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.arrivals import arrivals, named_collectives
from harness.measure.ops import op_times
from harness.units import fmt_seconds

BY_DEVICE_CSV = "by_device.csv"


def by_device(events: pd.DataFrame) -> pd.DataFrame:
    """``schema.OPS_BY_DEVICE``: each device's ``measured_s`` (median over steps) per op."""
    parts = [op_times(g).assign(**{schema.HOST: h, schema.DEVICE: d})
             for (h, d), g in events.groupby([schema.HOST, schema.DEVICE], observed=True)]
    return pd.concat(parts, ignore_index=True)[list(schema.OPS_BY_DEVICE)]


def clock_offsets(arr: pd.DataFrame) -> dict[int, int]:
    """Host -> ns to add to its times to put them on the first host's clock, from an ARRIVALS
    table: the median over the executions both ran of the difference of their ends (each
    host's median end over its devices). {} for one host."""
    hosts = sorted(arr[schema.HOST].unique().tolist())
    if len(hosts) < 2:
        return {}
    key = [schema.PROGRAM, schema.OP, schema.STEP, schema.EXECUTION, schema.HOST]
    ends = arr.groupby(key)[schema.END_NS].median().unstack(schema.HOST)
    out = {int(hosts[0]): 0}
    for h in hosts[1:]:
        d = (ends[hosts[0]] - ends[h]).dropna()
        out[int(h)] = int(d.median()) if len(d) else 0
    return out


def from_last_arrival(events: pd.DataFrame) -> pd.DataFrame:
    """EVENTS of several hosts with each collective (as its name says) counted from its
    group's last arrival, on the hosts' clocks aligned (``clock_offsets``): its wait left
    out (module docstring)."""
    coll = named_collectives(events) if schema.HOST in events.columns else set()
    if not coll or events[schema.HOST].nunique() < 2:
        return events
    arr = arrivals(events, coll, None, clock_offsets(arrivals(events, coll)))
    out = events.copy()
    out.loc[arr.index, schema.START_NS] = arr[schema.LAST_ARRIVE_NS]
    out.loc[arr.index, schema.DURATION_NS] = np.maximum(
        arr[schema.END_NS] - arr[schema.LAST_ARRIVE_NS], 0)
    return out


def host_columns(events: pd.DataFrame) -> pd.DataFrame:
    """``schema.OPS_HOSTS``: per op, each host's measured_s (median over its devices), its min,
    max and spread (the cross-host skew) and the slowest host; a collective's time from its
    group's last arrival (``from_last_arrival``)."""
    events = from_last_arrival(events)
    per_host = pd.concat([op_times(g).assign(**{schema.HOST: h})
                          for h, g in events.groupby(schema.HOST, observed=True)],
                         ignore_index=True)
    g = per_host.groupby([schema.PROGRAM, schema.OP])
    out = g.agg(**{schema.HOSTS: (schema.HOST, "nunique"),
                   schema.HOST_MIN_S: (schema.MEASURED_S, "min"),
                   schema.HOST_MAX_S: (schema.MEASURED_S, "max")})
    out[schema.HOST_SKEW_S] = out[schema.HOST_MAX_S] - out[schema.HOST_MIN_S]
    out[schema.SLOWEST_HOST] = per_host.loc[g[schema.MEASURED_S].idxmax(), schema.HOST].values
    return out.reset_index()[list(schema.OPS_HOSTS)]


def with_host_columns(run_tables, events: pd.DataFrame):
    """``run_tables`` (``harness.record.Tables``) with the host columns
    (``host_columns`` of ``events``) in its ops, and a note naming the op whose time differs
    most between hosts (``harness.runs.pipeline.from_capture`` adds them to a job's run)."""
    keys = [schema.PROGRAM, schema.OP]
    ops = run_tables.ops.merge(host_columns(events), on=keys, how="left")
    skew = []
    if len(ops):
        top = ops.loc[ops[schema.HOST_SKEW_S].idxmax()]
        skew.append(f"cross-host skew is largest for {top[schema.OP]}: "
                    f"{fmt_seconds(top[schema.HOST_SKEW_S])} between hosts, slowest on "
                    f"process {top[schema.SLOWEST_HOST]} (per-host columns in ops.csv, per "
                    f"device in {BY_DEVICE_CSV})")
    run_tables.ops, run_tables.notes = ops, run_tables.notes + skew
    return run_tables
