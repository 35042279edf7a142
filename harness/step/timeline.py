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

The two unions and their overlap are measured from the intervals; the time something ran is
then ``compute_s + comm_s - overlapped_comm_s`` (the union of all the intervals, measured
without merging them a third time), so ``compute_s + exposed_comm_s + idle_s`` and
``overlapped_comm_s + exposed_comm_s`` add up to ``timeline_step_s`` and ``comm_s``.
Ops whose interval holds others (``while``, ``call``, ``conditional``) are left out: their
body's ops are counted themselves.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.grouping import exact_sums, groups
from harness.measure.ops import named
from harness.step.inflight import async_spans, paired  # noqa: F401 (async_spans: re-exported)

_NS = 1e-9


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) (each ending at or after its start) as disjoint
    intervals, sorted (integer or float times, kept in their dtype)."""
    return _merged(starts, ends)[:2]


def _merged(starts: np.ndarray, ends: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``merged``, and the interval each piece starts with (its index in ``starts``)."""
    if len(starts) == 0:
        return (np.zeros(0, np.asarray(starts).dtype), np.zeros(0, np.asarray(ends).dtype),
                np.zeros(0, np.int64))
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts)[order]
    reach = np.maximum.accumulate(np.asarray(ends)[order])  # the latest end so far
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]  # a start after everything so far: a new piece
    first = np.flatnonzero(new)
    # a piece ends at the latest end so far at its last interval: every interval ends at or
    # after its start, so none before the piece reaches that far
    return s[first], reach[np.append(first[1:] - 1, len(s) - 1)], order[first]


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


class _Grouped:
    """The events of every (step, device) on one axis: each group's times moved to a range of
    its own (in order, a nanosecond apart), so that one pass of ``merged`` or ``_overlap`` over
    all of them never joins two groups' intervals, and its pieces are summed per group after.
    ``keys``: the (step, device) of each group; ``group``: each event's group; ``comm``: which
    events communicate; ``compute``: the union of the others' intervals, made once, and the
    group of each of its pieces."""

    def __init__(self, events: pd.DataFrame, comm: np.ndarray):
        self.group, first = groups(events, [schema.STEP, schema.DEVICE])
        n = len(first)
        self.keys = list(zip(events[schema.STEP].to_numpy(np.int64)[first].tolist(),
                             events[schema.DEVICE].to_numpy(np.int64)[first].tolist()))
        s = events[schema.START_NS].to_numpy(np.int64)
        e = s + events[schema.DURATION_NS].to_numpy(np.int64)
        lo = np.full(n, np.iinfo(np.int64).max)
        hi = np.full(n, np.iinfo(np.int64).min)
        np.minimum.at(lo, self.group, s)
        np.maximum.at(hi, self.group, e)
        self.span = hi - lo
        offset = np.concatenate([[0], np.cumsum(self.span + 1)[:-1]])
        shift = offset[self.group] - lo[self.group]
        e += shift  # (in place, and the shift let go: millions of events)
        self.s, self.e = s + shift, e
        del shift
        self.comm = comm
        self.compute = self.union(~comm)

    def union(self, of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The union of the intervals of the events ``of`` selects in each group: its pieces
        (start, end: sorted) and the group of each (its first event's)."""
        us, ue, first = _merged(self.s[of], self.e[of])
        return us, ue, self.group[np.flatnonzero(of)[first]]

    def total(self, group: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` summed per group, each counted in its ``group``."""
        return np.bincount(group, weights=values, minlength=len(self.keys))


def decompose(events: pd.DataFrame, comm_ops: Collection[str],
              apart: Collection[str] = ()) -> pd.DataFrame:
    """``schema.STEP_TIMES``: per (step, device), the step's time split as the module says.
    ``comm_ops``: the ops that communicate (by name); ``apart``: ops left out (containers)."""
    ev = events[~named(events[schema.OP], set(apart))]
    return _decompose(_Grouped(ev, named(ev[schema.OP], set(comm_ops))))


def _decompose(g: _Grouped) -> pd.DataFrame:
    if not g.keys:
        return pd.DataFrame(columns=list(schema.STEP_TIMES))
    cs, ce, cg = g.compute
    compute = g.total(cg, ce - cs)
    ks, ke, kg = g.union(g.comm)
    comm_s = g.total(kg, ke - ks)
    overlapped = g.total(kg, _overlap(ks, ke, cs, ce))
    busy = compute + comm_s - overlapped  # the union of both: each, less what they share
    steps, devices = zip(*g.keys)
    return pd.DataFrame({schema.STEP: np.asarray(steps, np.int64),
                         schema.DEVICE: np.asarray(devices, np.int64),
                         schema.TIMELINE_STEP_S: g.span * _NS,
                         schema.COMPUTE_S: compute * _NS,
                         schema.COMM_S: comm_s * _NS,
                         schema.OVERLAPPED_COMM_S: overlapped * _NS,
                         schema.EXPOSED_COMM_S: (comm_s - overlapped) * _NS,
                         schema.IDLE_S: (g.span - busy) * _NS}, columns=list(schema.STEP_TIMES))


def exposed_by_op(events: pd.DataFrame, comm_ops: Collection[str],
                  apart: Collection[str] = ()) -> pd.DataFrame:
    """Per communication op: its time per step and the part of it no compute op covered, each
    summed per (step, device), then the median over steps per device and over devices (as
    ``measured_s``), in seconds."""
    ev = events[~named(events[schema.OP], set(apart))]
    comm = named(ev[schema.OP], set(comm_ops))
    return _exposed(_Grouped(ev, comm) if comm.any() else None, ev[schema.OP])


def _exposed(g: _Grouped | None, op: pd.Series, own: np.ndarray | None = None
             ) -> pd.DataFrame:
    """Per communication op: ``comm_s``, its intervals' time, and ``exposed_comm_s``, the part
    of its own time (``own``: per event, the time the op itself held the device, ending with
    its interval: an async pair's ``-done``, the core blocked on the transfer; default the
    whole interval) that no compute covered: never more than its own. Each summed per (step,
    device), then as ``measured_s`` is (``harness.measure.ops``): the median over steps per
    device, then over devices; the medians keep ``exposed <= own`` per op."""
    if g is None or not g.comm.any():
        return pd.DataFrame(columns=[schema.OP, schema.COMM_S, schema.EXPOSED_COMM_S])
    comm, (cs, ce, _) = g.comm, g.compute
    s, e = g.s[comm], g.e[comm]
    code, names = _codes(op)
    t = e - s
    mine = t if own is None else np.minimum(np.asarray(own)[comm], t)
    per = pd.DataFrame({"_op": code[comm], "_group": g.group[comm], "t": t,
                        "exposed": mine - _overlap(e - mine, e, cs, ce)})
    found = groups(per, ["_op", "_group"]) if exact_sums(t) else None
    if found is None:
        per = per.groupby(["_op", "_group"])[["t", "exposed"]].sum().reset_index()
    else:  # each (op, group)'s sums by np.bincount (exact: the sums are of integers)
        pair, first = found
        per = pd.DataFrame({"_op": per["_op"].to_numpy()[first],
                            "_group": per["_group"].to_numpy()[first],
                            **{c: np.bincount(pair, weights=per[c].to_numpy(np.float64))
                               for c in ("t", "exposed")}})
    device = np.asarray([d for _, d in g.keys], np.int64)[per["_group"].to_numpy()]
    per = (per.assign(_device=device).groupby(["_op", "_device"])[["t", "exposed"]].median()
           .groupby(level=0).median() * _NS)
    return pd.DataFrame({schema.OP: names[per.index.to_numpy()],
                         schema.COMM_S: per["t"].to_numpy(),
                         schema.EXPOSED_COMM_S: per["exposed"].to_numpy()})


def _codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(each row's code, the names the codes index): a categorical's own codes, else
    ``pd.factorize``'s of the names as text."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories.astype(str).to_numpy()
    code, names = pd.factorize(column.astype(str))
    return code, np.asarray(names, dtype=object)


def _median_step(g: pd.DataFrame) -> pd.Series:
    """The row of the step whose length is the median (the lower one of an even count): its
    terms add up as the step's did, which medians taken term by term would not."""
    ordered = g.sort_values(schema.TIMELINE_STEP_S, kind="stable")
    return ordered.iloc[(len(ordered) - 1) // 2]


TERMS = (schema.COMPUTE_S, schema.COMM_S, schema.OVERLAPPED_COMM_S, schema.EXPOSED_COMM_S,
         schema.IDLE_S)


def measured_step(per_step: pd.DataFrame, devices: Collection[int] = ()) -> dict:
    """The step object's measured part from ``decompose``'s table: each device's median step
    (its terms from that one step), and the slowest device's as the step; ``devices``: every
    device of the run, those with no ops listed as idle (not averaged in)."""
    if per_step.empty:
        return {}
    rows = [_median_step(g) for _, g in per_step.groupby(schema.DEVICE, observed=True)]
    table = pd.DataFrame(rows).sort_values(schema.DEVICE)
    slowest = table.loc[table[schema.TIMELINE_STEP_S].idxmax()]
    out = {schema.STEP_S: float(slowest[schema.TIMELINE_STEP_S]),
           **{t: float(slowest[t]) for t in TERMS},
           schema.DEVICE: int(slowest[schema.DEVICE]), schema.STEP: int(slowest[schema.STEP]),
           schema.STEPS: int(per_step[schema.STEP].nunique())}
    listed = [{schema.DEVICE: int(r[schema.DEVICE]),
               schema.STEP_S: float(r[schema.TIMELINE_STEP_S]),
               **{t: float(r[t]) for t in TERMS}} for _, r in table.iterrows()]
    seen = set(table[schema.DEVICE].astype(int))
    listed += [{schema.DEVICE: int(d), schema.IDLE_DEVICE: True}
               for d in sorted(set(devices) - seen)]
    out[schema.DEVICES] = listed
    return out


def spans(events: pd.DataFrame, comm_ops: Collection[str], device: int, step: int
          ) -> pd.DataFrame:
    """``schema.STEP_SPANS`` of one (step, device): each op's interval in seconds from the
    step's first op, of kind "comm" for the communication ops, else "compute" (all on the
    device's lane: EVENTS do not say which stream or thread ran an op)."""
    ev = events[(events[schema.DEVICE] == device) & (events[schema.STEP] == step)]
    s = ev[schema.START_NS].to_numpy(np.int64)
    t0 = int(s.min()) if len(s) else 0
    comm = named(ev[schema.OP], set(comm_ops))
    return pd.DataFrame({schema.OP: ev[schema.OP].astype(str).to_numpy(),
                         schema.LANE: schema.LANE_DEVICE,
                         schema.KIND: np.where(comm, schema.KIND_COMM, schema.KIND_COMPUTE),
                         schema.START_S: (s - t0) * _NS,
                         schema.END_S: (s - t0 + ev[schema.DURATION_NS].to_numpy(np.int64)) * _NS}
                        ).sort_values(schema.START_S, kind="stable").reset_index(drop=True)


def measure(events: pd.DataFrame, comm_ops: Collection[str], *, apart: Collection[str] = (),
            pairs: Mapping[str, str] | None = None, devices: Collection[int] = (),
            top: int | None = None) -> tuple[dict, pd.DataFrame]:
    """The step object's measured part (``measured_step``) with each communication op's time
    and exposed part per step, the most exposed first (``top`` of them; default every one: the
    COLLECTIVES table joins them, ``harness.explain``), and the ``spans`` of
    the step it names (the slowest device's median step). ``pairs``: async start -> done
    names, made one span each (``harness.step.inflight``) where the layout gives the
    transfer's time to the ``-done``."""
    if events.empty:
        return {}, pd.DataFrame(columns=list(schema.STEP_SPANS))
    ev, own = paired(events, pairs or {})
    kept = ~named(ev[schema.OP], set(apart))
    ev = ev[kept]
    g = _Grouped(ev, named(ev[schema.OP], set(comm_ops)))
    out = measured_step(_decompose(g), devices)
    # a pair is in flight from its -start to its -done's end, but the step waits on it only
    # while its -done blocks: other transfers' waits under its span are theirs, not its
    per_op = _exposed(g, ev[schema.OP], own[kept])
    if len(per_op):
        per_op = per_op.sort_values([schema.EXPOSED_COMM_S, schema.COMM_S], ascending=False,
                                    kind="stable")
        per_op = per_op if top is None else per_op.head(top)
        out[schema.STEP_COLLECTIVES] = [
            {schema.OP: r[schema.OP], schema.COMM_S: float(r[schema.COMM_S]),
             schema.EXPOSED_COMM_S: float(r[schema.EXPOSED_COMM_S])}
            for _, r in per_op.iterrows()]
    if not out:
        return out, pd.DataFrame(columns=list(schema.STEP_SPANS))
    return out, spans(ev, comm_ops, out[schema.DEVICE], out[schema.STEP])
