"""Async pairs measured as waits: the ops whose efficiency a report leaves out, and why.

An async pair's work is priced once, on the half the trace times (``harness.hlo.cost``). On TPU
that is the ``-done``, which ``XLA Ops`` times as the core blocked until the transfer lands:
only the part of the transfer no other work hid (``harness.step.inflight``). Its roofline time
is the whole transfer's (bytes over the link's bandwidth, the book's roofline chapter), so
predicted over measured is no efficiency: on the TPU v6e fixture, ``copy-done.1`` moves
5.37 GB from HBM to the host in 168 ms at 32 GB/s while the core waits on another copy, and then
waits 3 ns for it (xprof's ``hlo_stats`` times it 2.97 ns too): 5,592,405,333%.

Two ways to give such an op a usable figure:

- price it as it is measured, its predicted exposed wait: the transfer's roofline time less the
  work the schedule overlaps it with. The simulated step plays exactly that
  (``harness.step.simulate``; on that fixture 0 s for the two hidden copies, 161 to 168 ms for
  the four waited on). But that is one schedule played on a model of the links, not a roofline:
  no lower bound (hardware that moves two copies at once where the model queues them on one
  lane waits less than predicted, above 100% again), and the simulation takes each transfer's
  time from the OPS table's ``predicted_s``, which must stay the whole transfer's.
- leave its efficiency out (NaN: "-" in text, null in JSON) with a note naming the ops. This is
  the one taken. Its ``-start``, priced 0 because the ``-done`` carries the pair, goes with it:
  0 over a few ns of issuing is bookkeeping, not an efficiency. Every aggregate (per category,
  per program, the run's) leaves both out of both of its sums, as it does unmodeled ops, so none
  sets a wait against a whole transfer. Their time still counts as measured (coverage, share,
  the step); the step line's prediction, which plays the schedule, is the figure that prices
  the waits.

On GPU and CPU the trace times the ``-start`` (it runs the transfer's kernel), which carries the
work; the ``-done`` is priced 0 there and keeps its efficiency.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.units import fmt_seconds
from predictions.rules import ASYNC_PAIRS

_SHOWN = 8  # ops the note names at most


def left_out(ops: pd.DataFrame) -> np.ndarray:
    """Per row of an OPS table, whether its efficiency is left out (module docstring): a
    ``-done`` measured as its wait (``wait_s``) and priced its pair's transfer (``predicted_s``
    above 0), and the ``-start`` ops priced 0 of each program that has one."""
    none = np.zeros(len(ops), bool)
    if not len(ops) or schema.WAIT_S not in ops.columns or schema.PREDICTED_S not in ops.columns:
        return none
    done = (ops[schema.WAIT_S].notna() & (ops[schema.PREDICTED_S].fillna(0.0) > 0)).to_numpy()
    if not done.any() or schema.OPCODE not in ops.columns:
        return done
    keys = [c for c in (schema.PROGRAM, schema.PROGRAM_ID) if c in ops.columns]
    program = (pd.Series(list(zip(*(ops[c].astype(str) for c in keys))), index=ops.index)
               if keys else pd.Series(0, index=ops.index))
    start = (ops[schema.OPCODE].isin(list(ASYNC_PAIRS)) & (ops[schema.PREDICTED_S] == 0)
             & program.isin(set(program[done])))
    return done | start.to_numpy()


def left_out_note(ops: pd.DataFrame) -> str:
    """One note naming the ``-done`` ops whose efficiency is left out, and why; "" for none."""
    mask = left_out(ops)
    dones = ops[mask & ops.get(schema.WAIT_S, pd.Series(np.nan, index=ops.index)).notna()
                .to_numpy()]
    if dones.empty:
        return ""
    names = dones[schema.OP].astype(str).tolist()
    shown = ", ".join(names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")
    starts = int(mask.sum()) - len(dones)
    return (f"efficiency left out for {len(dones)} async -done op(s) ({shown})"
            + (f" and {starts} -start op(s) priced 0 for them" if starts else "")
            + f": each -done is priced its whole transfer "
            f"({fmt_seconds(float(dones[schema.PREDICTED_S].sum()))} for the {len(dones)}) but "
            f"measured as its wait, the part of it no other work hid "
            f"({fmt_seconds(float(dones[schema.MEASURED_S].sum()))}); aggregates leave them out "
            "too; the step line's prediction, which plays the schedule, prices the waits")
