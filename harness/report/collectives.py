"""The collectives table as a run's report shows it: one figure per idea (issue 58).

``harness.explain`` times a collective by the step's timeline where the step lists it (its
intervals, start to end: on a CPU host the wait at the rendezvous for the slowest device
included) and by the OPS table elsewhere, in one column, ``measured_s``. The op table's
``measured_s`` is the device's own time in the op (on a CPU host its share of the cores every
device shares, ``harness.measure.shares``): an all-gather read 598 us in the op table and
633 us there, both captioned "median over steps and devices". The report keeps both, each named
for what it is: ``measured_s`` is the op table's own figure for the op, and ``span_s`` the
timeline's (``schema.SPAN_S``), which ``exposed_comm_s`` is a part of.
"""
from __future__ import annotations

import pandas as pd

from harness import schema


def _listed(step: dict | None) -> set[str]:
    """The ops the step object times on its timeline (``schema.STEP_COLLECTIVES``)."""
    return {str(row.get(schema.OP)) for row in (step or {}).get(schema.STEP_COLLECTIVES) or []}


def _main(row: pd.Series, meta: dict) -> bool:
    """Whether a collectives row is of the step program (the one the step object is of)."""
    program, program_id = meta.get(schema.PROGRAM), meta.get(schema.PROGRAM_ID)
    if program and str(row.get(schema.PROGRAM, program)) != str(program):
        return False
    return not program_id or str(row.get(schema.PROGRAM_ID, "")) in ("", str(program_id))


def _op_table(ops: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Each collectives row's ``measured_s`` as the op table shows it: the op's own row of the
    same program (and compilation, where both name one); NaN where the op table has none."""
    if ops is None or not len(ops) or schema.MEASURED_S not in ops.columns:
        return pd.Series(float("nan"), index=rows.index)
    keys = [k for k in (schema.PROGRAM, schema.PROGRAM_ID, schema.OP)
            if k in ops.columns and k in rows.columns]
    table = ops[keys + [schema.MEASURED_S]].astype({k: str for k in keys})
    table = table.groupby(keys, as_index=False)[schema.MEASURED_S].sum(min_count=1)
    found = rows[keys].astype(str).merge(table, on=keys, how="left")
    return pd.Series(found[schema.MEASURED_S].to_numpy(float), index=rows.index)


def shown(collectives: pd.DataFrame | None, ops: pd.DataFrame, step: dict | None,
          meta: dict) -> pd.DataFrame | None:
    """``collectives`` (``schema.COLLECTIVES``) with ``measured_s`` the op table's figure and
    ``span_s`` the step timeline's, where the step times the op (the step program's rows);
    the explanation's own figure is the span there and the op table's elsewhere, so no figure
    is lost."""
    if collectives is None or not len(collectives):
        return collectives
    out = collectives.copy()
    listed = _listed(step)
    timed = out.apply(lambda row: str(row[schema.OP]) in listed and _main(row, meta), axis=1)
    out[schema.SPAN_S] = out[schema.MEASURED_S].where(timed.astype(bool))
    out[schema.MEASURED_S] = _op_table(ops, out)
    return out
