"""A registered workload whose run is a loop of programs driven from Python (the record's
``loop``: ``llama_generate``'s request stream) end to end: the loop captured whole
(``harness.capture.loop``), its trace read as a script's is (``pipeline.analyze_trace`` of its
segments: every program in the programs table, the loop's step program reported), and the
loop's own record of that same run kept under ``serving_loop.LOOP`` with what the trace says of
it: each program's executions beside the loop's calls, and the stream's time between
executions split by cause (``stream_waits``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.tables import groups_of, host_cores
from harness.capture.loop import capture_loop
from harness.chip import drift
from harness.measure.arrivals import named_collectives
from harness.measure.ops import by_execution
from harness.record import Run
from harness.report import serving_loop
from harness.runs.pipeline import analyze_trace
from harness.step import containers
from harness.step.waits import waits

# The causes a device waits on the host for between executions (harness.step.waits): its share
# of the stream is the host's (the runtime's launch, the loop's own Python, copies, callbacks).
HOST_CAUSES = (schema.WAIT_DISPATCH_S, schema.WAIT_PYTHON_S, schema.WAIT_INPUT_S,
               schema.WAIT_HOST_S)


def run_loop(built, *, preset: str, overrides: dict | None, out_dir: Path, chip=None) -> Run:
    """Capture ``built``'s loop into ``out_dir`` and make its Run (not saved; its trace is
    ``out_dir``, the run's to store): the step program's tables, as a script's, and the loop's
    figures (``serving_loop.LOOP``) on the chip the run is predicted for."""
    loop = built.workload.loop(built.cfg, built.mesh, built.args)  # build's params, not again
    devices = list(built.mesh.devices.flat)
    before = drift.probe(devices)   # the host's speed around the capture, as run_built's
    result = capture_loop(loop, out_dir, built.run_meta(preset, overrides), devices=devices)
    host = drift.record(before, drift.probe(devices))
    run = analyze_trace(out_dir, chip=chip, workload=built, program=loop.step_program,
                        host_drift=host)
    run.capture.trace_dir, run.capture.owned = out_dir, True
    record = loop.figures(result, run.chip)
    record[serving_loop.PROGRAMS_RAN] = executions(run, loop.programs.values())
    record[serving_loop.BETWEEN] = stream_waits(run)
    run.meta[serving_loop.LOOP] = record
    return run


def executions(run: Run, names) -> dict[str, dict]:
    """Per program the loop names: its executions in the trace, device time per execution
    (``schema.MEASURED_S``) and over the stream, every device (``schema.TOTAL_S``)."""
    table = run.programs if run.programs is not None else schema.empty(schema.PROGRAMS)
    out = {}
    for name in names:
        mine = table[table[schema.PROGRAM].astype(str) == name]
        out[name] = {schema.EXECUTIONS: int(mine[schema.EXECUTIONS].sum()),
                     schema.MEASURED_S: float(mine[schema.MEASURED_S].sum()),
                     schema.TOTAL_S: float(mine[schema.TOTAL_S].sum())}
    return out


def numbered(events: pd.DataFrame, runs: dict[str, int]) -> pd.DataFrame:
    """EVENTS of every program, each execution one step, numbered in the order they started:
    a program that ran ``runs[name]`` times (the programs table's count) runs each op its
    occurrences on a device over that many times an execution (``by_execution``)."""
    keys = [schema.PROGRAM, schema.PROGRAM_ID]
    parts = []
    for (name, _), g in events.groupby(keys, observed=True):
        n = max(runs.get(str(name), 0), 1)
        each = g.groupby([schema.DEVICE, schema.OP], observed=True).size().groupby(
            level=schema.OP, observed=True).max()
        parts.append(by_execution(g, {str(op): max(int(k) // n, 1) for op, k in each.items()}))
    ev = pd.concat(parts) if parts else events
    each = ev.groupby([*keys, schema.STEP], observed=True, sort=False).ngroup().to_numpy()
    first = ev[schema.START_NS].groupby(each).min()
    rank = (first.rank(method="first").to_numpy() - 1).astype(np.int32)
    return ev.assign(**{schema.STEP: rank[each]})


def stream_waits(run: Run) -> dict:
    """The stream's time from its first op to its last, each device's summed over every
    execution of every program and averaged over devices (``schema.PERIOD_S``), and the part
    the devices waited, by cause (``harness.step.waits``: between two executions, the host's
    launch ``dispatch``, its own Python ``python``, copies ``input``, callbacks ``host``; in a
    collective, its ``peers``), the control-flow ops left out as the step's waits leave them (a
    loop's op spans its body's, the gaps between them included); {} for a run without its
    fresh trace."""
    trace = run.trace
    if trace is None or trace.events.empty:
        return {}
    programs = run.programs if run.programs is not None else schema.empty(schema.PROGRAMS)
    runs = programs.groupby(schema.PROGRAM)[schema.EXECUTIONS].max()
    ev = trace.events
    held = containers(schema.empty(schema.OPS_PREDICTED), ev)  # a loop's op spans its body's
    ev = ev[~ev[schema.OP].astype(str).isin(held)] if held else ev
    modules = getattr(run, "modules", None) or {}  # each program's HLO: its replica groups
    table, untold = waits(numbered(ev, {str(k): int(v) for k, v in runs.items()}), trace.host,
                          collectives=named_collectives(ev),
                          groups=groups_of(modules) if modules else None,
                          cores=host_cores() if trace.shares_cores else None)
    per_device = table.groupby([schema.HOST, schema.DEVICE])[
        [schema.PERIOD_S, schema.WAITING_S, *schema.WAIT_CAUSES]].sum()
    out = {k: float(v) for k, v in per_device.mean().items()}
    out[schema.EXECUTIONS] = int(table[schema.STEP].nunique())
    out[serving_loop.HOST_S] = sum(out[c] for c in HOST_CAUSES)
    if untold:
        out[serving_loop.UNTOLD] = untold
    return out
