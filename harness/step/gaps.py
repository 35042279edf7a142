"""The idle of every device of a program's EVENTS at once (``harness.step.waits`` splits it by
cause): the ops sorted by (host, device, start); a gap where an op starts after every earlier op
of its device ended (the union of its ops' intervals leaves it out); each gap with the op before
it (the last to end of those before) and the one after; and each (host, device, step)'s period.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.grouping import groups
from harness.step import runs

_NS = 1e-9


class Gaps:
    """The idle of every device of EVENTS ``ev`` (with a HOST column) at once: its ops sorted
    by (host, device, start) (``s``, ``e``, ``step``, ``prog``: its program's number); a gap
    [a, b) where an op starts after every earlier op of its device ended, ``prev`` the op
    before it (the last to end of those before) and ``next`` the one after."""

    def __init__(self, ev: pd.DataFrame):
        s = ev[schema.START_NS].to_numpy(np.int64)
        host = host_ids(ev).to_numpy(np.int64)
        device = ev[schema.DEVICE].to_numpy(np.int64)
        self.by = by = runs.order(host, device, s)  # row i here is ev's row by[i]
        self.s, self.host, self.device = s[by], host[by], device[by]
        self.e = self.s + ev[schema.DURATION_NS].to_numpy(np.int64)[by]
        self.step = ev[schema.STEP].to_numpy(np.int64)[by]
        self.prog = programs(ev)[by]
        self.new = runs.starts(self.host, self.device)  # a device's first op
        reach = runs.reach(self.new, self.e)  # s is sorted: a gap where reach < next s
        gap = np.flatnonzero((self.s[1:] > reach[:-1]) & ~self.new[1:])
        self.a, self.b = reach[gap], self.s[gap + 1]
        # the latest op to end at the reach so far (a device's first op does: its own)
        ended = np.where(self.e == reach, np.arange(len(self.e)), -1)
        self.prev, self.next = np.maximum.accumulate(ended)[gap], gap + 1

    def steps(self) -> tuple[pd.DataFrame, np.ndarray]:
        """Per (host, device, step), sorted by them: its period, from its first op's start
        to the device's next step's (the last step's: to its last op's end); and per gap its
        row there: its earlier op's step's."""
        run = np.cumsum(self.new) - 1  # the op's device, numbered
        per, row = groups(pd.DataFrame({"run": run, "step": self.step}, copy=False),
                          ["run", "step"])
        first = np.full(len(row), np.iinfo(np.int64).max)
        last = np.full(len(row), np.iinfo(np.int64).min)
        np.minimum.at(first, per, self.s)
        np.maximum.at(last, per, self.e)
        own = runs.starts(run[row])  # a device's first step
        after = np.append(np.where(own[1:], last[:-1], first[1:]), last[-1:])
        table = pd.DataFrame({schema.STEP: self.step[row], schema.DEVICE: self.device[row],
                              schema.PERIOD_S: (after - first) * _NS,
                              schema.HOST: self.host[row]})
        return table, per[self.prev]


def programs(ev: pd.DataFrame) -> np.ndarray:
    """Per row, a number equal where its program and program id are (-1 where one is
    missing), as ``groupby(...).ngroup()`` numbers them; categoricals by their codes."""
    cols = [ev[c] for c in (schema.PROGRAM, schema.PROGRAM_ID) if c in ev.columns]
    if not all(isinstance(c.dtype, pd.CategoricalDtype) for c in cols):
        return ev.groupby([c.name for c in cols], observed=True, sort=False).ngroup().to_numpy()
    codes = [c.cat.codes.to_numpy(np.int64) for c in cols]
    out = runs.combined(*codes)
    if out is None:
        return ev.groupby([c.name for c in cols], observed=True, sort=False).ngroup().to_numpy()
    return np.where(np.any([c < 0 for c in codes], axis=0), -1, out)


def host_ids(events: pd.DataFrame) -> pd.Series:
    """The HOST column of EVENTS; host 0 for every row where it has none."""
    if schema.HOST in events.columns:
        return events[schema.HOST]
    return pd.Series(0, index=events.index, name=schema.HOST, dtype=np.int64)
