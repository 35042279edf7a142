"""An async pair on the timeline: its ``-start`` and ``-done`` made one span, the transfer in
flight, where the layout times only the core's side of it (TPU ``XLA Ops``: the ``-start``
issues the transfer in a few ns, the ``-done`` blocks the core until it lands, so the ``-done``'s
own time is the transfer's exposed part, xprof's ``hlo_stats`` self time of it).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.ops import as_text, named
from harness.step import runs


def async_spans(events: pd.DataFrame, pairs: Mapping[str, str]) -> pd.DataFrame:
    """EVENTS with each async pair's two events made one, from the ``-start``'s start to the
    ``-done``'s end and named as the ``-done``: the transfer in flight, where a layout shows
    only the core's side of it (TPU ``XLA Ops``: the ``-start`` issues it in a few ns, the
    ``-done`` blocks until it lands). ``pairs``: start name -> done name, as the trace names
    them. On each device the k-th start pairs with the k-th done; one without a partner stays
    as it is."""
    return paired(events, pairs)[0]


def paired(events: pd.DataFrame, pairs: Mapping[str, str]) -> tuple[pd.DataFrame, np.ndarray]:
    """``async_spans``, and each row's own time (ns): a pair's, its ``-done``'s (the wait);
    any other row's, its duration. Every pair at once: each side's rows ordered by (pair,
    device, start) and numbered within their (pair, device); the k-th done meets the k-th
    start. Rows come out as the rows of no pair, then pair by pair (in ``pairs``' order) its
    dones, then its starts that met no done, each in (device, start) order."""
    if not pairs or events.empty:
        return events, events[schema.DURATION_NS].to_numpy(np.int64)
    names = as_text(events[schema.OP])
    keep = np.flatnonzero(~named(events[schema.OP], set(pairs) | set(pairs.values())))
    pair_s = names.map({s: i for i, s in enumerate(pairs)}).to_numpy(np.float64)
    pair_d = names.map({d: i for i, d in enumerate(pairs.values())}).to_numpy(np.float64)
    device = events[schema.DEVICE].to_numpy(np.int64)
    start = events[schema.START_NS].to_numpy(np.int64)
    duration = events[schema.DURATION_NS].to_numpy(np.int64)
    s_rows, s_pair, s_k = _numbered(pair_s, device, start)
    d_rows, d_pair, d_k = _numbered(pair_d, device, start)
    # each done's start partner: same pair, device and number (-1: none)
    s_at = pd.MultiIndex.from_arrays([s_pair, device[s_rows], s_k])
    met = s_at.get_indexer(pd.MultiIndex.from_arrays([d_pair, device[d_rows], d_k]))
    partner = np.where(met >= 0, s_rows[np.maximum(met, 0)], d_rows)
    first = np.minimum(start[partner], start[d_rows])
    lone = np.ones(len(s_rows), bool)
    lone[met[met >= 0]] = False
    # pair by pair: its dones (0), then its lone starts (1); a stable sort keeps each in order
    rows = np.concatenate([d_rows, s_rows[lone]])
    side = np.concatenate([np.zeros(len(d_rows), np.int8), np.ones(lone.sum(), np.int8)])
    by = runs.order(np.concatenate([d_pair, s_pair[lone]]), side)
    new_start = np.concatenate([first, start[s_rows[lone]]])[by]
    new_end = np.concatenate([start[d_rows] + duration[d_rows], start[s_rows[lone]]
                              + duration[s_rows[lone]]])[by]
    rows = rows[by]
    out = events.take(np.concatenate([keep, rows])).reset_index(drop=True)
    out[schema.START_NS] = np.concatenate([start[keep], new_start])
    out[schema.DURATION_NS] = np.concatenate([duration[keep], new_end - new_start])
    return out, np.concatenate([duration[keep], duration[rows]])


def _numbered(pair: np.ndarray, device: np.ndarray, start: np.ndarray
              ) -> tuple[np.ndarray, ...]:
    """The rows of some pair (``pair`` not NaN) in (pair, device, start) order, each one's
    pair and its number among its (pair, device)'s rows."""
    rows = np.flatnonzero(~np.isnan(pair))
    p = pair[rows].astype(np.int64)
    rows = rows[runs.order(p, device[rows], start[rows])]
    p = pair[rows].astype(np.int64)
    new = runs.starts(p, device[rows]) if len(rows) else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(new, np.arange(len(rows)), 0)) if len(rows) else \
        np.zeros(0, np.int64)
    return rows, p, np.arange(len(rows)) - first
