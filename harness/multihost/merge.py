"""The merged run of a multi-host job (`harness.multihost.run`), built on process 0 from every
process's EVENTS, whose ``schema.HOST`` column names the process each row came from.

- ``merged_events``: the processes' EVENTS as one table, a ``schema.HOST`` column naming each
  row's process;
- ``host_columns``: per op, the spread of its time over hosts (``schema.OPS_HOSTS``): a host's
  ``measured_s`` is the median over its devices, as ``ops.op_times`` defines it for one host;
  ``with_host_columns``: a run's ops with them, and a note naming the op of largest skew;
- ``by_device``: per op and device, the device's median time over steps (``by_device.csv``);
- ``store_merged``: analyse the merged EVENTS with process 0's HLO, add the host columns and
  notes, store ONE run.
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.multihost.xspace import write_merged
from harness.ops import op_times
from harness.report import tables
from harness.runs.pipeline import from_capture
from harness.runs.workload import new_run_id
from harness.trace.load import TraceEvents

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

BY_DEVICE_CSV = "by_device.csv"
MERGED = "merged"  # the layout name of every process's EVENTS together (no single host's)


def merged_events(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Each process's EVENTS (``parts[i]``: process i's) as one table with a ``schema.HOST``
    column; programs and ops categorical over every process's names."""
    merged = pd.concat([d.assign(**{schema.HOST: i}).astype({schema.PROGRAM: str, schema.OP: str})
                        for i, d in enumerate(parts)], ignore_index=True)
    return merged.astype({schema.PROGRAM: "category", schema.OP: "category"})


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


def with_host_columns(run, events: pd.DataFrame):
    """``run`` with the host columns (``host_columns`` of ``events``) in its ops, and a note
    naming the op whose time differs most between hosts."""
    keys = [schema.PROGRAM, schema.OP]
    ops = run.ops.merge(host_columns(events), on=keys, how="left")
    skew = []
    if len(ops):
        top = ops.loc[ops[schema.HOST_SKEW_S].idxmax()]
        skew.append(f"cross-host skew is largest for {top[schema.OP]}: "
                    f"{tables.fmt_seconds(top[schema.HOST_SKEW_S])} between hosts, slowest on "
                    f"process {top[schema.SLOWEST_HOST]} (per-host columns in ops.csv, per "
                    f"device in {BY_DEVICE_CSV})")
    run.ops, run.notes = ops, run.notes + skew
    return run


def store_merged(built, cap, events: pd.DataFrame, processes: list[dict], *, chip, meta: dict,
                 out, plots: bool = True):
    """Analyse every process's ``events`` as one capture (process 0's ``cap``: its HLO, cost
    analysis and trace directory), add the host columns, store one run under ``out``."""
    import jax

    notes = []
    if jax.default_backend() == "cpu":
        notes.append(f"CPU run over {len(processes)} processes: collectives between processes "
                     "go through gloo over TCP, so they measure rendezvous and socket latency, "
                     "not a network")
    meta = dict(meta, processes=processes)
    name = built.workload.name
    # each process numbers its own compilations: one program across the job has one id per
    # process, so the merged table names programs by name alone
    if schema.PROGRAM_ID in events.columns:
        events = events.assign(**{schema.PROGRAM_ID: ""})
    # MERGED is no single-host layout: the processes' clocks differ, so the host-share timing
    # of a CPU host (harness.shares) is not taken; ops keep their per-device durations
    run = from_capture(cap, chip=chip, workload=built, meta=meta, notes=notes,
                       trace=TraceEvents(events, MERGED, str(cap.trace_dir)),
                       title=built.title(meta[schema.PRESET],
                                         f" across {len(processes)} processes"))
    run = with_host_columns(run, events)
    keys = [schema.PROGRAM, schema.OP]
    ops = run.ops
    # the report's ops only: control-flow containers (while, call) are left out as in ops
    table = by_device(events[events[schema.PROGRAM] == cap.program]).merge(ops[keys], on=keys)
    run.files[BY_DEVICE_CSV] = table.to_csv(index=False)
    path = run.save(out / new_run_id(name), plots=plots)
    write_merged(path, events, processes)
    return run, path
