"""Sharding check: collectives XLA inserted beyond what the layout calls for (`sharding.md`).

A workload declares the collectives its sharding needs (e.g. case 2 of the sharding chapter:
one AllGather). Any collective kind XLA ran more often than declared is listed with its cost,
the first thing to look at when a layout is slow.
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from predictions.rules import COLLECTIVE_OPCODES

# HLO opcodes -> the collective they perform (async pairs are one collective; `-done` is free).
COLLECTIVE_KIND: dict[str, str] = {op: kind for c, kind in COLLECTIVE_OPCODES.items()
                                   for op in (c, f"{c}-start")}

COLUMNS = (schema.OP, schema.OPCODE, "kind", "expected", "found", schema.MEASURED_S,
           schema.PREDICTED_S, schema.SHARE)


def collective_kind(opcode: str, collective: str = "") -> str:
    """The collective an op performs ("" for none); fusions wrapping one report it in
    ``collective``."""
    return COLLECTIVE_KIND.get(opcode, "") or (collective if collective in
                                                COLLECTIVE_KIND.values() else "")


def unexpected_collectives(ops: pd.DataFrame, expected: dict[str, int]) -> pd.DataFrame:
    """Ops of every collective kind found more often than ``expected`` allows, costliest first.

    Which of several same-kind ops is the extra one cannot be told apart, so all ops of an
    over-represented kind are listed, with the expected and found counts.
    """
    kinds = pd.Series([collective_kind(o, c) for o, c in
                       zip(ops[schema.OPCODE], ops.get(schema.COLLECTIVE, [""] * len(ops)))],
                      index=ops.index, dtype=object)
    found = kinds[kinds != ""].value_counts().to_dict()
    excess = {k for k, n in found.items() if n > expected.get(k, 0)}
    mask = kinds.isin(excess)
    extra = kinds[mask]
    rows = ops[mask].assign(kind=extra.values,
                            expected=[expected.get(k, 0) for k in extra],
                            found=[found[k] for k in extra])
    rows = rows.sort_values(schema.MEASURED_S, ascending=False)
    return rows[[c for c in COLUMNS if c in rows.columns]].reset_index(drop=True)
