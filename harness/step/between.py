"""The host's time between two executions, split by what the trace shows
(``harness.step.waits``): a device idle between two executions (two steps, two programs) while
its host launched the next waited for the host, which was

- in the runtime, launching the program (its launch events: PjRt's ``Execute``,
  ``harness.trace.host_events``): dispatch, or, on a host whose devices are threads on shared
  cores, a core where the cores all ran ops meanwhile (the device's own launch queued for one);
- copying inputs or running callbacks (their own events): input, host (counted first);
- busy outside the runtime, where no runtime event covers the time: the user's Python between
  steps (data loading, logging, a sleep): python, named where the user's annotations or Python
  frames on the launching thread cover it (``python_names``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.step import runs
from harness.step.gaps import Gaps
from harness.step.runs import covered
from harness.step.timeline import merged
from harness.trace.host_events import ANNOTATION, DISPATCH, HOST, INPUT

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
    """The intervals [a, b) cut by a union (disjoint, sorted ``us``/``ue``): each piece they
    share (start, end) and the interval it is of (``_cut``, less the union's piece)."""
    return _cut(a, b, us, ue)[:3]


def _cut(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The intervals [a, b) cut by a union (disjoint, sorted ``us``/``ue``): each piece they
    share (start, end), the interval it is of and the union's piece; sorted by interval, then
    time."""
    lo = np.searchsorted(ue, a, side="right")  # the union's first piece ending after a
    hi = np.searchsorted(us, b, side="left")  # its pieces starting before b
    n = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(a)), n)
    j = lo[i] + np.arange(len(i)) - np.repeat(np.cumsum(n) - n, n)
    s, e = np.maximum(a[i], us[j]), np.minimum(b[i], ue[j])
    keep = e > s
    return s[keep], e[keep], i[keep], j[keep]


def python_names(host: pd.DataFrame, g: Gaps, on: np.ndarray, at: np.ndarray,
                 part: np.ndarray, owner: np.ndarray, table: pd.DataFrame) -> pd.DataFrame:
    """``schema.WAIT_NAMES``: per gap ``at`` (indices into ``g``'s; ``on``: each gap's host,
    ``owner`` its row of ``table``, the WAITS rows) its python ``part`` (ns: the gap less its
    host's runtime events for its device) covered by each name of its host's annotations
    (``harness.trace.host_events``: the outermost of the user's), summed per row of ``table``
    in seconds. A name's events are merged first (on two threads at once it counts once), and
    its time in a gap is at most the gap's python part."""
    ann = host[host[schema.KIND] == ANNOTATION]
    has = part > 0
    if ann.empty or not has.any():
        return schema.empty(schema.WAIT_NAMES)
    at, part = at[has], part[has]
    name = ann[schema.EVENT_NAME].astype("category")
    code = name.cat.codes.to_numpy(np.int64)
    runtime = host[host[schema.KIND].isin([DISPATCH, *TOLD])]
    where, device = on[at], g.device[g.prev[at]]
    gap, of, took = [], [], []
    for h in np.unique(where).tolist():
        mine = (ann[schema.HOST] == h).to_numpy()
        if not mine.any():
            continue
        s = ann[schema.START_NS].to_numpy(np.int64)[mine]
        ns, ne, nc = _by_name(code[mine], s, s + ann[schema.DURATION_NS].to_numpy(np.int64)[mine])
        for d in np.unique(device[where == h]).tolist():
            m = np.flatnonzero((where == h) & (device == d))
            us, ue = union(runtime[runtime[schema.HOST] == h], d)
            ps, pe, i = _pieces(g.a[at[m]], g.b[at[m]], *_outside(us, ue))
            s, e, k, j = _cut(ns, ne, ps, pe)
            gap.append(m[i[j]])
            of.append(nc[k])
            took.append(e - s)
    if not gap:
        return schema.empty(schema.WAIT_NAMES)
    n = len(name.cat.categories)
    key, t = _summed(np.concatenate(gap) * n + np.concatenate(of), np.concatenate(took))
    t = np.minimum(t, part[key // n])  # a name's time in a gap: at most its python part
    key, t = _summed(owner[at[key // n]] * n + key % n, t)
    row = table.iloc[key // n]
    return pd.DataFrame({schema.STEP: row[schema.STEP].to_numpy(),
                         schema.HOST: row[schema.HOST].to_numpy(),
                         schema.DEVICE: row[schema.DEVICE].to_numpy(),
                         schema.EVENT_NAME: name.cat.categories[key % n],
                         schema.WAIT_PYTHON_S: t * 1e-9})[list(schema.WAIT_NAMES)]


def _summed(key: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``v`` summed per distinct ``key`` (sorted)."""
    u, inv = np.unique(key, return_inverse=True)
    return u, np.bincount(inv, weights=v, minlength=len(u))


def _outside(us: np.ndarray, ue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time outside a union (disjoint, sorted ``us``/``ue``), as disjoint sorted pieces."""
    big = np.iinfo(np.int64)
    s, e = np.append(big.min, ue), np.append(us, big.max)
    keep = e > s
    return s[keep], e[keep]


def _by_name(code: np.ndarray, s: np.ndarray, e: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals [s, e) merged per name (``code``): each piece's start, end and name."""
    o = runs.order(code, s)
    code, s, e = code[o], s[o], e[o]
    new = runs.starts(code)
    reach = runs.reach(new, e)
    first = np.flatnonzero(new | np.insert(s[1:] > reach[:-1], 0, True))  # a piece starts
    return s[first], reach[np.append(first[1:] - 1, len(s) - 1)], code[first]
