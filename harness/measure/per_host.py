"""Per-host columns of a job's ops (``harness.multihost.run``, ``harness trace`` of several hosts'
traces): every process's EVENTS, whose ``schema.HOST`` column names the process each row came from.

- ``host_columns``: per op, the spread of its time over hosts (``schema.OPS_HOSTS``): a host's
  ``measured_s`` is the median over its devices, as ``ops.op_times`` defines it for one host;
  ``with_host_columns``: a run's ops with them, and a note naming the op of largest skew;
- ``by_device``: per op and device, the device's median time over steps (``by_device.csv``).

``harness.multihost.store`` analyses and stores the merged run.
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.measure.ops import op_times
from harness.units import fmt_seconds

BY_DEVICE_CSV = "by_device.csv"


def by_device(events: pd.DataFrame) -> pd.DataFrame:
    """``schema.OPS_BY_DEVICE``: each device's ``measured_s`` (median over steps) per op."""
    parts = [op_times(g).assign(**{schema.HOST: h, schema.DEVICE: d})
             for (h, d), g in events.groupby([schema.HOST, schema.DEVICE], observed=True)]
    return pd.concat(parts, ignore_index=True)[list(schema.OPS_BY_DEVICE)]


def host_columns(events: pd.DataFrame) -> pd.DataFrame:
    """``schema.OPS_HOSTS``: per op, each host's measured_s (median over its devices), its min,
    max and spread (the cross-host skew) and the slowest host."""
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
    """``run_tables`` (``harness.analysis.tables.Tables``) with the host columns
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
