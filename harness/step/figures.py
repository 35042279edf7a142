"""The step object of a run (``schema.STEP_OBJECT``): the measured step, the book beside it,
and (``harness.step.simulate``) the step the compiled schedule predicts.

Which ops communicate is read from the program's OPS table: the collectives (category
``collective``, async halves included) and the async transfers (``copy-start``/``copy-done``,
``send``/``recv`` and their ``-done``s, copies over the host link). A program without HLO has
no opcodes: its ops are judged by the opcode their name starts with (``all-reduce.3``).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import pandas as pd

from harness import schema
from harness.step.bounds import step_bounds
from harness.step.timeline import measure
from predictions.rules import ASYNC_PAIRS, COLLECTIVE_OPCODES, CONTAINERS

# async transfers that are no collective: a DMA between memory spaces or a point-to-point copy
TRANSFERS = frozenset({"copy-start", "copy-done", "send", "send-done", "recv", "recv-done"})
_COMM_OPCODES = frozenset(
    {*COLLECTIVE_OPCODES, *TRANSFERS,
     *(k for k, v in ASYNC_PAIRS.items() if k.removesuffix("-start") in COLLECTIVE_OPCODES),
     *(v for k, v in ASYNC_PAIRS.items() if k.removesuffix("-start") in COLLECTIVE_OPCODES)})


def _opcode_of_name(op: str) -> str:
    """``all-gather-start.3`` -> ``all-gather-start``: the opcode a name without HLO implies."""
    head, _, tail = op.rpartition(".")
    return head if head and tail.isdigit() else op


def comm_ops(ops: pd.DataFrame) -> set[str]:
    """The names of the ops that communicate (module docstring)."""
    if ops.empty:
        return set()
    name = ops[schema.OP].astype(str)
    code = (ops[schema.OPCODE].fillna("").astype(str) if schema.OPCODE in ops.columns
            else pd.Series("", index=ops.index))
    code = code.where(code != "", name.map(_opcode_of_name))
    comm = code.isin(_COMM_OPCODES)
    if schema.CATEGORY in ops.columns:
        comm |= ops[schema.CATEGORY] == schema.CAT_COLLECTIVE
    if schema.HOST_BYTES in ops.columns:
        comm |= ops[schema.HOST_BYTES].fillna(0) > 0
    return set(name[comm])


def containers(ops: pd.DataFrame) -> set[str]:
    """Control-flow ops, whose trace intervals enclose the ops they run (left out)."""
    if schema.OPCODE not in ops.columns:
        return set()
    return set(ops.loc[ops[schema.OPCODE].isin(CONTAINERS), schema.OP].astype(str))


def step_figures(events: pd.DataFrame, ops: pd.DataFrame, *, pairs: Mapping[str, str] | None,
                 devices: Collection[int] = (), book=None) -> tuple[dict, pd.DataFrame]:
    """The step object of one program: its measured step from ``events`` (its EVENTS, one
    step per marker or execution), ``ops`` its OPS table, ``pairs`` the async start -> done
    names to make one span each (where the layout times the ``-done``: TPU), ``devices``
    every device of the run, ``book`` the workload's estimate (``predictions.step.Analytic``)
    for the bounds ({} where neither it nor a prediction gives them); with the spans of the
    step it describes (``schema.STEP_SPANS``), for its picture."""
    comm = comm_ops(ops)
    out, spans = measure(events, comm, apart=containers(ops), pairs=pairs, devices=devices)
    if out and not ops.empty and schema.PREDICTED_S in ops.columns:
        out.update(step_bounds(book, ops, comm))
    return out, spans
