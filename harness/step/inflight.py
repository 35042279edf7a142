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
from harness.measure.ops import named


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
    any other row's, its duration."""
    if not pairs or events.empty:
        return events, events[schema.DURATION_NS].to_numpy(np.int64)
    op = events[schema.OP].astype(str)
    keep = ~named(events[schema.OP], set(pairs) | set(pairs.values()))
    spans = [events[keep]]
    own = [events.loc[keep, schema.DURATION_NS].to_numpy(np.int64)]
    for start, done in pairs.items():
        s = events[op == start].sort_values([schema.DEVICE, schema.START_NS], kind="stable")
        d = events[op == done].sort_values([schema.DEVICE, schema.START_NS], kind="stable")
        s = s.assign(_k=s.groupby(schema.DEVICE, observed=True).cumcount())
        d = d.assign(_k=d.groupby(schema.DEVICE, observed=True).cumcount())
        both = d.merge(s[[schema.DEVICE, "_k", schema.START_NS]], on=[schema.DEVICE, "_k"],
                       how="left", suffixes=("", "_start"))
        matched = both[f"{schema.START_NS}_start"].notna()
        first = both[f"{schema.START_NS}_start"].where(matched, both[schema.START_NS])
        first = np.minimum(first.astype(np.int64), both[schema.START_NS])
        end = both[schema.START_NS] + both[schema.DURATION_NS]
        spans.append(both.assign(**{schema.START_NS: first, schema.DURATION_NS: end - first})
                     .drop(columns=["_k", f"{schema.START_NS}_start"]))
        own.append(both[schema.DURATION_NS].to_numpy(np.int64))  # the -done's: the wait
        alone = s.merge(d[[schema.DEVICE, "_k"]], on=[schema.DEVICE, "_k"], how="left",
                        indicator=True)
        spans.append(alone[alone["_merge"] == "left_only"].drop(columns=["_k", "_merge"]))
        own.append(spans[-1][schema.DURATION_NS].to_numpy(np.int64))
    return pd.concat(spans, ignore_index=True), np.concatenate(own)
