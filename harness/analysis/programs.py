"""The compilations a trace ran, each on its own: which one is the step (``step_program``),
how a name, a program id or ``all`` picks them (``reported``; a table's rows of one:
``of_program``), each one's module, predicted OPS table (``predicted``) and measured tables
(``measure``), and the PROGRAMS table of them all. Which ran, and how one is named and chosen,
is read from the EVENTS (``harness.measure.programs``).
``harness.analysis.tables.derive`` puts them together.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis import recompiles
from harness.analysis.gaps import join, workload_efficiency
from harness.hlo import Module, hlo_costs
from harness.measure.ops import by_execution, executions, named, op_sums, op_times, step_samples
from harness.measure.programs import (
    ALL,
    ProgramKey,
    chosen,
    module_for,
    program_name,
    row_keys,
)
from harness.trace.load import TraceEvents

# A program that ran this often is a step (a training or serving loop's body); one that ran
# fewer times is set-up (initialisation, a first eager call) or an occasional evaluation.
STEP_EXECUTIONS = 3


def of_program(table: pd.DataFrame, program: str) -> pd.DataFrame:
    """The rows of ``table`` that ``program`` names (``chosen``: a name, a program id; "" or
    ``ALL``: every row)."""
    if program in ("", ALL) or schema.PROGRAM not in table.columns or not len(table):
        return table
    return table[[chosen(key, program) for key in row_keys(table)]]


def step_program(per: Mapping[ProgramKey, Measured]) -> ProgramKey:
    """The step program: the compilation with the most device time (``schema.TOTAL_S``) among
    those that ran at least ``STEP_EXECUTIONS`` times; the one with the most device time where
    none ran so often."""
    def device_time(key: ProgramKey) -> float:
        return float(per[key].ops[schema.TOTAL_S].sum())

    steps = [k for k in per if per[k].executions >= STEP_EXECUTIONS]
    return max(steps or per, key=device_time)


def reported(per: Mapping[ProgramKey, Measured], program: str) -> list[ProgramKey]:
    """The compilations a report is about, the step program first: by default (``program``
    "") the step program alone; ``ALL``: every one; a name: every compilation of it; a
    program id: that one (none: ``[]``)."""
    if not per:
        return []
    picked = {k: m for k, m in per.items() if chosen(k, program)}
    if not picked:
        return []
    main = step_program(picked)
    return [main] if not program else [main, *(k for k in picked if k != main)]


def predicted(module: Module | None, chip, trace: TraceEvents, system=None) -> pd.DataFrame:
    """One compilation's predicted OPS table, ops named as the trace names them (empty
    without a module); on ``system``, collectives priced at the network levels they cross."""
    if module is None:
        return schema.empty(schema.OPS_PREDICTED)
    predicted = hlo_costs(module, chip, async_on=trace.async_time_on, system=system)
    # the trace names an async op (``fusion-start.3`` in the HLO text) by the op it wraps
    if trace.async_names:
        predicted[schema.OP] = predicted[schema.OP].replace(trace.async_names)
    return predicted


class Measured(NamedTuple):
    """One compilation measured: its OPS table, its EVENTS (each execution a step when the
    trace has no step markers), its executions and its per-(op, device, step) sums
    (``harness.measure.ops.op_sums``, which ``samples`` takes up for a program a report
    shows)."""

    ops: pd.DataFrame
    events: pd.DataFrame
    executions: int
    sums: pd.DataFrame


def measure(events: pd.DataFrame, key: ProgramKey, predicted: pd.DataFrame, modeled: bool,
            trace: TraceEvents) -> Measured:
    """One compilation's measured tables, from its per-(op, device, step) sums made once
    (``harness.measure.ops.op_sums``); ``modeled`` False: it has no HLO."""
    mine = events[schema.PROGRAM] == key[0]
    if schema.PROGRAM_ID in events.columns:
        mine &= named(events[schema.PROGRAM_ID], {key[1]})
    ev = events if mine.all() else events[mine]
    counts = dict(zip(predicted[schema.OP].astype(str), predicted[schema.COUNT]))
    if not trace.stepped:
        ev = by_execution(ev, counts)
    shares = trace.shares_cores and schema.HOST_NS in ev.columns
    sums = op_sums(ev, shares)
    measured = op_times(ev, shares, sums)
    ops = join(measured.assign(**{schema.PROGRAM: key[0]}),
                  predicted.assign(**{schema.PROGRAM: key[0]}))
    if schema.PROGRAM_ID not in ops.columns:  # every row names its compilation
        ops.insert(1, schema.PROGRAM_ID, key[1])
    if not modeled:
        ops[schema.WHY_UNMODELED] = "no HLO for this program (the trace holds none; --hlo)"
    return Measured(ops, ev, executions(ev, counts, sums=sums), sums)


def samples(measured: Measured, trace: TraceEvents) -> pd.DataFrame:
    """The per-step samples of one compilation a report shows
    (``harness.measure.ops.step_samples``)."""
    shares = trace.shares_cores and schema.HOST_NS in measured.events.columns
    return step_samples(measured.events, shares, measured.sums)


def program_table(per: Mapping[ProgramKey, Measured]) -> pd.DataFrame:
    """``schema.PROGRAMS``: one row per compilation that ran, most device time first."""
    rows = []
    for (name, pid), (ops, _, runs, _) in per.items():
        rows.append({schema.PROGRAM: name, schema.PROGRAM_ID: pid, schema.EXECUTIONS: runs,
                     schema.MEASURED_S: float(ops[schema.MEASURED_S].sum()),
                     schema.PREDICTED_S: float(ops[schema.PREDICTED_S].fillna(0.0).sum()),
                     schema.EFFICIENCY: workload_efficiency(ops),
                     schema.TOTAL_S: float(ops[schema.TOTAL_S].sum())})
    table = pd.DataFrame(rows, columns=list(schema.PROGRAMS))
    total = table[schema.TOTAL_S].sum()
    table[schema.SHARE] = table[schema.TOTAL_S] / total if total > 0 else np.nan
    return table.sort_values(schema.TOTAL_S, ascending=False, kind="stable").reset_index(
        drop=True)


def program_notes(ran, shown, per, modules, main, mesh=None, asked: str = "",
                  arguments=None) -> list[str]:
    """What a report says about the programs: which one it is about (``asked``: the program
    the caller named, else the step program by device time) and where the others are, what
    differs in each other compilation of its name (on ``mesh``'s axis names, its parameters
    by the paths ``arguments`` records: ``harness.analysis.recompiles``), and any measured
    only."""
    notes = []
    others = [k for k in ran if k not in shown]
    why = ("the program asked for" if asked not in ("", ALL) and chosen(main, asked) else
           f"the most device time among the programs run {STEP_EXECUTIONS} or more times"
           if per[main].executions >= STEP_EXECUTIONS else
           f"the most device time; none ran {STEP_EXECUTIONS} times")
    if len(shown) > 1:
        notes.append(f"{len(ran)} programs ran; the ops of {len(shown)} are listed, each named by "
                     f"program and program id; the step line and summary are of "
                     f"{program_name(main)} ({why})")
    elif others:
        names = ", ".join(program_name(k) for k in others[:4]) + (", ..." if len(others) > 4
                                                                  else "")
        notes.append(f"{len(ran)} programs ran; this report is of the step program "
                     f"{program_name(main)} ({why}); the others ({names}) are in the programs "
                     f"table: --program NAME|ID|all to report them")
    runs = {k: m.executions for k, m in per.items()}
    again = [k for k in ran if k[0] == main[0] and k != main]
    names = (arguments or {}).get(main[0])  # schema.ARGUMENT_PATHS: per program name
    notes += [recompiles.note(main[0], main, k, runs, modules, mesh, names)
              for k in again[:recompiles.NOTES]]
    if len(again) > recompiles.NOTES:
        notes.append(f"{main[0]} compiled {len(again) - recompiles.NOTES} more time(s): the "
                     f"programs table lists each")
    blind = [k for k in shown if module_for(modules, k) is None]
    if blind:
        notes.append(f"no HLO for {', '.join(program_name(k) for k in blind[:4])}: measured "
                     f"only (give the program's optimized HLO with --hlo)")
    return notes
