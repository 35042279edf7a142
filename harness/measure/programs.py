"""Which compilations a trace ran, read from its EVENTS: each one's key (``ProgramKey``: name
and program id), the ones that ran, most device time first (``programs_ran``), how a name, a
program id or ``ALL`` picks them (``chosen``) and how a report names one (``program_name``).
The trace stage's decode parses the HLO of these programs only; the analysis measures and
predicts each on its own (``harness.analysis.programs``).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.grouping import exact_sums, groups

ProgramKey = tuple[str, str]  # (program name, program id): one compilation
ALL = "all"  # ``--program all``: every program that ran


def programs_ran(events: pd.DataFrame) -> list[ProgramKey]:
    """Every (program, program id) with op executions in EVENTS, most device time first."""
    by = [schema.PROGRAM, *([schema.PROGRAM_ID] if schema.PROGRAM_ID in events.columns
                            else [])]
    ns = events[schema.DURATION_NS].to_numpy(np.int64)
    found = groups(events, by) if exact_sums(ns) else None
    if found is None:
        t = events.groupby(by, observed=True)[schema.DURATION_NS].sum().reset_index()
    else:  # the groups numbered as groupby sorts them, summed by np.bincount (exactly)
        group, first = found
        t = events[by].take(first).reset_index(drop=True).assign(
            **{schema.DURATION_NS: np.bincount(group, weights=ns)})
    t = t.sort_values(schema.DURATION_NS, ascending=False, kind="stable")
    ids = t[schema.PROGRAM_ID] if schema.PROGRAM_ID in t.columns else [""] * len(t)
    ran = [(str(p), str(i)) for p, i in zip(t[schema.PROGRAM], ids)]
    return [k for k in ran if k[0] != ""] if len(ran) > 1 else ran


def chosen(key: ProgramKey, program: str) -> bool:
    """Whether ``program`` (a name, a program id; "" or ``ALL`` for every program) names
    ``key``."""
    return program in ("", ALL) or program in key


def program_name(key: ProgramKey) -> str:
    """``name(program id)``, or the name where the trace gives no id."""
    return f"{key[0]}({key[1]})" if key[1] else key[0]


def row_keys(table: pd.DataFrame) -> list[ProgramKey]:
    """The (name, program id) of each row of a table with a program column (OPS,
    COLLECTIVES; id "" where the table has none)."""
    ids = (table[schema.PROGRAM_ID].astype(str) if schema.PROGRAM_ID in table.columns
           else [""] * len(table))
    return list(zip(table[schema.PROGRAM].astype(str), ids))


def compilations(table: pd.DataFrame) -> list[ProgramKey]:
    """The compilations a table's rows are of, in the order they first appear."""
    if schema.PROGRAM not in table.columns:
        return []
    return list(dict.fromkeys(row_keys(table)))


def module_for(modules: Mapping, key: ProgramKey) -> object | None:
    """The module (``harness.hlo.Module``) of one compilation: by (name, id), else the only
    one of that name."""
    if key in modules:
        return modules[key]
    same = [m for (name, _), m in modules.items() if name == key[0]]
    return same[0] if len(same) == 1 else None
