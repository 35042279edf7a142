"""On a host whose devices share cores, an op's time is its share of the host's time.

XLA's CPU devices are threads, eight of them on two cores here. An op's own duration on such a
host tells how the threads happened to be scheduled more than what the op costs: in one step of
an 8-device matmul the same op lasted 3 ms on one device and 18 ms on another, and its median
over devices moved 2x between identical runs while the step's wall time held within 10%. Its
share of the host does not depend on the scheduling:

    share = D * (integral over the op's execution of dt / n(t))

with D the devices in the trace and n(t) the ops running at time t on all of them. Every device
running the same op at once: share = duration. An op running alone: D x its duration (it had
the host the D devices share). The shares of a step add up to D x the time ops were running, so
their mean over devices adds up to that time: measured on CPU, ``measured_s`` is a mean over
devices of each op's time, its share but for short executions (below; ``harness.measure.ops``),
and the ``cpu`` chip's matmul rate is timed the same way (``harness.chip.probes``).

Collectives count from the last arrival of their execution (``harness.measure.arrivals``). A
thread inside one after every device of its group has arrived holds its device, moving or
reducing: left out of n(t), llama_train's elementwise ops, which run no faster beside a
collective, were charged 2.5x their durations. Before the last arrival it is waiting, not
running: it neither gets a share nor dilutes the others'. Counted from its arrival, a thread
blocked in a long rendezvous charged the ops beside it too little: a matmul right after an
all-gather whose group waited 30 ms for a queued partner measured at a third of its cost, as
if the waiting threads had taken two thirds of the cores.
Control-flow ops (``while``, ``call``, ``conditional``) neither share nor count: their body ops
run inside them and are counted themselves.

An op's time (``host_ns``) is its share where that share lasts a scheduler slice (``SLICE_NS``)
or more: such an execution is preempted and resumed among the device threads, and its share is
the host time it took. A shorter one runs to completion on one core once started, and where
fewer ops ran beside it than the host has room for (a dispatch-bound decode step, devices
waiting in a rendezvous) its share charges it with cores it did not use: its time is then its
duration, where less. The ``cpu`` chip's probes are timed by the same rule
(``harness.chip.probes``), so a run's op and the roof it is set against are measured alike.
Such short executions leave the idle cores to no op: the host times of a step add up to at
most D x the time ops ran. Measured on llama_decode (8 devices, 2 cores), whose matmuls of 4 to
32 kFLOP run 1-3 us beside threads waiting in all-reduces: by shares, 4.9-10 us a step against
roofs of 1.5-2.6 us (efficiency median 0.34); by this rule 0.62; llama_train 0.70 -> 0.92,
llama_prefill 0.55 -> 0.89, on one trace each.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.arrivals import Groups, last_arrivals, named_collectives
from harness.measure.ops import named
from predictions.rules import CONTAINERS

# What a run's ``measured_s`` is (meta ``op_timing``): the mean over devices of each op's time
# on the host (``host_ns``), or the median over devices of its durations. Runs stored before
# the key existed timed every op the second way; HOST_SHARE runs, every execution by its share.
HOST_TIME = "host_time"
HOST_SHARE = "host_share"
DEVICE_MEDIAN = "device_median"
ON_HOST = frozenset({HOST_TIME, HOST_SHARE})  # the timings of a host whose devices share cores

# A scheduler time slice: Linux's base slice before its scaling by CPU count. An execution whose
# share lasts this long or more was preempted among the device threads; a shorter one ran to
# completion once started. Measured on the calibration's probes, every device busy (mean over
# devices, one step): 512x512 chained, share 11-13 ms and duration 11-14 ms, as a run's
# matmuls of that size; 64x64 chained, share 0.02-0.05 ms and duration 0.007-0.026 ms, where a
# run's 64x64x32 ops take 0.005-0.04 ms. 256x256 chained takes shares of 0.96-1.4 ms, which a
# 1 ms cut timed by share in one calibration and by duration in the next, and an MLP step's
# 134 MFLOP matmuls landed 1.6-2.1x from its others (1.41-1.56x with 0.75 ms).
SLICE_NS = 750_000


def op_timing(shared: bool) -> str:
    """The ``op_timing`` a run records: HOST_TIME when its devices share cores."""
    return HOST_TIME if shared else DEVICE_MEDIAN


def apart(predicted: pd.DataFrame) -> set[str]:
    """Ops of a predicted OPS table that keep their durations: the control-flow containers."""
    return apart_by_opcode(dict(zip(predicted[schema.OP].astype(str), predicted[schema.OPCODE])))


def apart_by_opcode(opcodes: Mapping[str, str]) -> set[str]:
    """The same from op name -> HLO opcode."""
    return {op for op, code in opcodes.items() if code in CONTAINERS}


def host_shares(events: pd.DataFrame, keep: Collection[str] = (),
                collectives: Collection[str] | None = None,
                groups: Groups | None = None) -> pd.DataFrame:
    """EVENTS with a ``share_ns`` column: each op execution's share of the host (its own
    duration for the ops named in ``keep``, ``apart``, which neither share nor count in n(t)),
    and a ``host_ns`` column: its time (``host_times``); ``duration_ns`` stays as the trace
    gave it. ``collectives``: the op names that are
    collectives (``harness.measure.arrivals.collective_ops``; default: as their names imply),
    which share and count from the last arrival of their execution (in their device's replica
    group where ``groups`` names it: ``arrivals.replica_groups``)."""
    schema.validate(events, schema.EVENTS, where="host_shares(events)")
    start = events[schema.START_NS].to_numpy(np.int64)
    end = start + events[schema.DURATION_NS].to_numpy(np.int64)
    start = _running_from(events, start, end, set(keep), collectives, groups)
    split = ~named(events[schema.OP], set(keep))
    out = events[schema.DURATION_NS].to_numpy(np.int64).copy()
    if not split.any():
        return _with_times(events, out)
    # n(t) is a step function: +1 at each start, -1 at each end of a splitting op. The stable
    # sort runs in about linear time here: a trace's events come in time order per device.
    # (Arrays are reused in place: a trace of millions of executions is memory-bound.)
    m = int(split.sum())
    t = np.concatenate([start, end] if m == len(split) else [start[split], end[split]])
    order = np.argsort(t, kind="stable")
    t = t[order]
    n = np.where(order < m, 1, -1)
    np.cumsum(n, out=n)
    # F(t) = integral of dt / n up to t, at each boundary (F[0] = 0): g[i] = gap before i over
    # the n before it. Equal times have equal F (no gap between them): their order is free.
    g = np.zeros(len(t), np.float64)
    np.subtract(t[1:], t[:-1], out=g[1:], casting="unsafe")
    running = n[:-1] > 0
    np.divide(g[1:], n[:-1], out=g[1:], where=running)
    g[1:][~running] = 0.0
    del t, n, running
    np.cumsum(g, out=g)
    at = np.empty_like(g)
    at[order] = g  # F at each start (the first m) and end (the rest)
    del g, order

    devices = events[schema.DEVICE].nunique()
    out[split] = np.rint(devices * (at[m:] - at[:m])).astype(np.int64)
    return _with_times(events, out)


def host_times(share: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Each execution's time on the host (module note): its ``share``, or its ``duration``
    where less and the share is shorter than ``SLICE_NS``."""
    short = share < SLICE_NS
    return np.where(short, np.minimum(share, duration), share)


def _with_times(events: pd.DataFrame, share: np.ndarray) -> pd.DataFrame:
    duration = events[schema.DURATION_NS].to_numpy(np.int64)
    return events.assign(**{schema.SHARE_NS: share,
                            schema.HOST_NS: host_times(share, duration)})


def _running_from(events: pd.DataFrame, start: np.ndarray, end: np.ndarray, keep: set[str],
                  collectives: Collection[str] | None, groups: Groups | None) -> np.ndarray:
    """When each execution starts running: its start, or for a collective the last arrival of
    its execution's group (at most its end)."""
    op = events[schema.OP]
    if collectives is None:
        collectives = named_collectives(events)
    waits = named(op, set(map(str, collectives)) - keep)
    if not waits.any():
        return start
    rows = np.flatnonzero(waits)
    last = last_arrivals(events.iloc[rows], groups)[0]
    out = start.copy()
    out[rows] = np.minimum(last, end[rows])
    return out
