"""The step as a whole, measured from the timeline: where each device's time went.

The book's question (chapters 1, 3 and 5) is whether communication hides under compute: a step
takes max(T_math, T_comms) when it overlaps and up to their sum when it does not. Per (step,
device), over the window from its first op's start to its last op's end
(``timeline_step_s``):

- ``compute_s``: the union of the compute ops' intervals;
- ``comm_s``: the union of the communication ops' intervals (collectives, async transfers);
- ``overlapped_comm_s``: the part of ``comm_s`` during which some compute op ran;
- ``exposed_comm_s``: the part of ``comm_s`` during which none did;
- ``idle_s``: the union of the gaps in which nothing ran (host, launch, synchronisation).

Each term is measured from the intervals on its own; ``compute_s + exposed_comm_s + idle_s``
and ``overlapped_comm_s + exposed_comm_s`` then add up to ``timeline_step_s`` and ``comm_s``.
Ops whose interval holds others (``while``, ``call``, ``conditional``) are left out: their
body's ops are counted themselves.
"""
from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from harness import schema

_NS = 1e-9


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as disjoint intervals, sorted."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]  # a start after everything so far: a new piece
    piece = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), np.int64)
    np.maximum.at(out_e, piece, e)
    return out_s, out_e


def _length(s: np.ndarray, e: np.ndarray) -> int:
    return int((e - s).sum())


def _overlap(s: np.ndarray, e: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Per interval [s, e), how much of it a union (disjoint, sorted us/ue) covers."""
    if len(us) == 0:
        return np.zeros(len(s), np.int64)
    covered = np.concatenate([[0], np.cumsum(ue - us)])  # union length before each piece

    def upto(t):  # union length in (-inf, t)
        i = np.searchsorted(us, t, side="right")  # pieces starting at or before t
        partial = np.where(i > 0, np.minimum(t, ue[np.maximum(i - 1, 0)])
                           - us[np.maximum(i - 1, 0)], 0)
        return covered[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(partial, 0)

    return upto(np.asarray(e)) - upto(np.asarray(s))


def decompose(events: pd.DataFrame, comm_ops: Collection[str],
              apart: Collection[str] = ()) -> pd.DataFrame:
    """``schema.STEP_TIMES``: per (step, device), the step's time split as the module says.
    ``comm_ops``: the ops that communicate (by name); ``apart``: ops left out (containers)."""
    rows = []
    ev = events[~events[schema.OP].astype(str).isin(set(apart))]
    for (step, device), g in ev.groupby([schema.STEP, schema.DEVICE], observed=True):
        s = g[schema.START_NS].to_numpy(np.int64)
        e = s + g[schema.DURATION_NS].to_numpy(np.int64)
        comm = g[schema.OP].astype(str).isin(set(comm_ops)).to_numpy()
        cs, ce = merged(s[~comm], e[~comm])
        ks, ke = merged(s[comm], e[comm])
        al, ae = merged(s, e)
        overlapped = int(_overlap(ks, ke, cs, ce).sum())
        comm_s = _length(ks, ke)
        rows.append({schema.STEP: int(step), schema.DEVICE: int(device),
                     schema.TIMELINE_STEP_S: (int(e.max()) - int(s.min())) * _NS,
                     schema.COMPUTE_S: _length(cs, ce) * _NS,
                     schema.COMM_S: comm_s * _NS,
                     schema.OVERLAPPED_COMM_S: overlapped * _NS,
                     schema.EXPOSED_COMM_S: (comm_s - overlapped) * _NS,
                     schema.IDLE_S: int((al[1:] - ae[:-1]).sum()) * _NS})
    return pd.DataFrame(rows, columns=list(schema.STEP_TIMES))


def exposed_by_op(events: pd.DataFrame, comm_ops: Collection[str],
                  apart: Collection[str] = ()) -> pd.DataFrame:
    """Per communication op: its time per step and the part of it no compute op covered, each
    summed per (step, device), then the median over steps and devices, in seconds."""
    ev = events[~events[schema.OP].astype(str).isin(set(apart))]
    comm = ev[schema.OP].astype(str).isin(set(comm_ops))
    parts = []
    for (step, device), g in ev.groupby([schema.STEP, schema.DEVICE], observed=True):
        c = comm.loc[g.index].to_numpy()
        s = g[schema.START_NS].to_numpy(np.int64)
        e = s + g[schema.DURATION_NS].to_numpy(np.int64)
        cs, ce = merged(s[~c], e[~c])
        if c.any():
            parts.append(pd.DataFrame({schema.OP: g[schema.OP].astype(str).to_numpy()[c],
                                       schema.STEP: step, schema.DEVICE: device,
                                       "t": e[c] - s[c],
                                       "exposed": e[c] - s[c] - _overlap(s[c], e[c], cs, ce)}))
    if not parts:
        return pd.DataFrame(columns=[schema.OP, schema.COMM_S, schema.EXPOSED_COMM_S])
    per = (pd.concat(parts).groupby([schema.OP, schema.STEP, schema.DEVICE])[["t", "exposed"]]
           .sum().groupby(level=0).median() * _NS)
    return per.rename(columns={"t": schema.COMM_S, "exposed": schema.EXPOSED_COMM_S}
                      ).reset_index()
