"""The host's time between two executions, split by what the trace shows
(``harness.step.waits``): a device idle between two executions (two steps, two programs) while
its host launched the next waited for the host, which was

- in the runtime, launching the program (its launch events: PjRt's ``Execute``,
  ``harness.trace.host_events``): dispatch, or, on a host whose devices are threads on shared
  cores, a core where the cores all ran ops meanwhile (the device's own launch queued for one);
- copying inputs or running callbacks (their own events): input, host (counted first);
- busy outside the runtime, where no runtime event covers the time: the user's Python between
  steps (data loading, logging, a sleep): python.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.step.gaps import Gaps
from harness.step.runs import covered
from harness.step.timeline import merged
from harness.trace.host_events import DISPATCH, HOST, INPUT

TOLD = (INPUT, HOST)  # the host events whose time is given to their own cause first


def union(host: pd.DataFrame, device: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``host``'s events for ``device`` or for every device (-1)."""
    h = host[host[schema.DEVICE].isin([-1, device])]
    s = h[schema.START_NS].to_numpy(np.int64)
    return merged(s, s + h[schema.DURATION_NS].to_numpy(np.int64))


def launching(a: np.ndarray, b: np.ndarray, host: pd.DataFrame) -> np.ndarray:
    """Per gap [a, b]: whether the host was launching an execution in it (a launch event
    of ``host`` meets it): the intervals that start by b, less those that ended before a."""
    h = host[host[schema.KIND] == DISPATCH]
    s = np.sort(h[schema.START_NS].to_numpy(np.int64))
    e = np.sort(s if not len(h) else
                (h[schema.START_NS] + h[schema.DURATION_NS]).to_numpy(np.int64))
    return np.searchsorted(s, b, side="right") - np.searchsorted(e, a, side="left") > 0


def launch(host: pd.DataFrame, g: Gaps, on: np.ndarray, at: np.ndarray, sat: dict
           ) -> tuple[np.ndarray, np.ndarray]:
    """Per gap ``at`` (indices into ``g``'s; ``on``: each gap's host): the part of it its
    host's launch events cover that its copies and callbacks do not (theirs are their
    causes'), in ns, split in two: while the host's cores did not all run ops, and while they
    did (``sat``: per host, ``saturated``; the device's own launch waited for a core)."""
    free, busy = np.zeros(len(at), np.int64), np.zeros(len(at), np.int64)
    every = host[host[schema.KIND].isin([DISPATCH, *TOLD])]
    if not (every[schema.KIND] == DISPATCH).any():
        return free, busy
    told = every[every[schema.KIND] != DISPATCH]
    where, device = on[at], g.device[g.prev[at]]
    for h, d in set(zip(where.tolist(), device.tolist())):
        m = np.flatnonzero((where == h) & (device == d))
        a, b = g.a[at[m]], g.b[at[m]]
        for sign, ev in ((1, every[every[schema.HOST] == h]),
                         (-1, told[told[schema.HOST] == h])):
            if ev.empty:
                continue
            ps, pe, i = _pieces(a, b, *union(ev, d))
            whole = np.bincount(i, weights=pe - ps, minlength=len(m)).astype(np.int64)
            full = np.bincount(i, weights=covered(ps, pe, *sat[h]), minlength=len(m)
                               ).astype(np.int64)
            free[m] += sign * (whole - full)
            busy[m] += sign * full
    return free, busy


def _pieces(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals [a, b) (disjoint, sorted) cut by a union (disjoint, sorted ``us``/``ue``):
    each piece they share (start, end) and the interval it is of."""
    lo = np.searchsorted(ue, a, side="right")  # the union's first piece ending after a
    hi = np.searchsorted(us, b, side="left")  # its pieces starting before b
    n = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(a)), n)
    j = lo[i] + np.arange(len(i)) - np.repeat(np.cumsum(n) - n, n)
    s, e = np.maximum(a[i], us[j]), np.minimum(b[i], ue[j])
    keep = e > s
    return s[keep], e[keep], i[keep]
