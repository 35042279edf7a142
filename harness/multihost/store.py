"""The merged run of a multi-host job, stored once on process 0: every process's EVENTS
(``harness.measure.per_host``) analysed with process 0's HLO, the host columns and notes added.
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.measure.per_host import BY_DEVICE_CSV, by_device
from harness.multihost.xspace import write_merged
from harness.report import files as report_files
from harness.runs.pipeline import from_capture
from harness.runs.workload import new_run_name
from harness.trace.hosts import MERGED
from harness.trace.load import TraceEvents

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.


def store_merged(built, cap, events: pd.DataFrame, processes: list[dict], *, chip, meta: dict,
                 out, plots: bool = True):
    """Analyse every process's ``events`` as one capture (process 0's ``cap``: its HLO, cost
    analysis and trace directory; the analysis adds the host columns), store one run under
    ``out``, its report (``plots``: with its PNGs) and per-device table beside it."""
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
    # MERGED is no single-host format: the processes' clocks differ, so the host-share timing
    # of a CPU host (harness.measure.shares) is not taken; ops keep their per-device durations
    run = from_capture(cap, chip=chip, workload=built, meta=meta, notes=notes,
                       trace=TraceEvents(events, MERGED, str(cap.trace_dir)),
                       title=built.title(meta[schema.PRESET],
                                         f" across {len(processes)} processes"))
    keys = [schema.PROGRAM, schema.OP]
    ops = run.ops
    # the report's ops only: control-flow containers (while, call) are left out as in ops
    table = by_device(events[events[schema.PROGRAM] == cap.program]).merge(ops[keys], on=keys)
    path = run.save(out / new_run_name(name), files=lambda r: {
        **report_files(r, plots=plots), BY_DEVICE_CSV: table.to_csv(index=False)})
    write_merged(path, events, processes)
    return run, path
