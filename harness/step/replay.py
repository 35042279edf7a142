"""Measured durations for the ``replay`` of a program's schedule (``harness.step.simulate``):
every op at the time the trace measured for it, placed by the schedule, never at its measured
start. Replaying a step checks the schedule model itself: where the replay lands on the
measured step, the model of the core, the links and the waits explains the timeline.

Per op, from the step the step object describes (the slowest device's median step: replayed,
it should land on that step's own length; medians over steps would not, as on a host whose
devices share cores the wait of a rendezvous falls on a different collective in each step):

- ``core_s``: the op's time on its device per execution, its measured duration (less what
  overlapped earlier ops: concurrent threads or streams) plus the gap that preceded it on the
  device (nothing running since the previous op ended: a launch or host delay it waited
  for), summed over the step, divided by the op's executions per step (``count``). Without
  the gaps a replay leaves out the device's idle time; with them, a program that runs one op
  after another replays to its own step, and what the replay tests is the overlap of
  communication with compute.
- ``transfer_s``: an async pair's transfer, keyed by its ``-start``: where the layout times the
  ``-start`` (GPU: the collective's kernel on its own stream) the ``-start``'s duration, and
  the ``-start`` takes no core time; where it times the ``-done`` (TPU XLA Ops: the ``-done``
  blocks until the data lands) the span from the ``-start``'s start to the ``-done``'s end,
  and the ``-done``'s wait is left to the replay.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure import ops
from harness.step.inflight import async_spans

_NS = 1e-9


def _with_gaps(ev: pd.DataFrame, off_core: Collection[str]) -> pd.Series:
    """Each event's time on the device's timeline in its step (ns): the idle gap before it (the
    time since every earlier op on the core ended, if positive) and the part of its interval no
    earlier op already covered (an op that ran beside another on a second thread or stream adds
    only what reaches past it, so the core's one lane does not count that time twice).
    ``off_core`` ops (transfers on their own lanes) keep their duration and neither take a gap
    nor end one."""
    on = ~ops.named(ev[schema.OP], set(off_core))
    out = ev[schema.DURATION_NS].astype(np.int64).copy()
    core = ev[on].sort_values([schema.STEP, schema.START_NS], kind="stable")
    start = core[schema.START_NS].to_numpy(np.int64)
    end = start + core[schema.DURATION_NS].to_numpy(np.int64)
    step = core[schema.STEP].to_numpy()
    reach = np.zeros(len(core), np.int64)
    for k in np.unique(step):  # the latest end so far, within the step
        i = np.flatnonzero(step == k)
        reach[i] = np.maximum.accumulate(end[i])
    first = np.r_[True, step[1:] != step[:-1]] if len(step) else np.zeros(0, bool)
    before = np.r_[0, reach[:-1]] if len(reach) else reach
    gap = np.where(first, 0, np.maximum(start - before, 0))
    held = np.where(first, end - start, np.maximum(end - np.maximum(start, before), 0))
    out.loc[core.index] = gap + held
    return out


def _per_execution(ev: pd.DataFrame, column: str, counts: Mapping[str, int]) -> pd.Series:
    """Per op (trace name): ``column`` (ns) summed per step, the median over steps, over the
    op's executions per step, in seconds."""
    per_step = ev.groupby([schema.OP, schema.STEP], observed=True)[column].sum()
    median = per_step.groupby(level=0, observed=True).median()
    n = np.array([max(int(counts.get(str(op), 1)), 1) for op in median.index])
    return pd.Series(median.to_numpy(float) * _NS / n, index=median.index.astype(str))


def replay_durations(events: pd.DataFrame, counts: Mapping[str, int], *, device: int, step: int,
                     trace_names: Mapping[str, str], pairs: Mapping[str, str],
                     time_on: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(core_s, transfer_s)`` by HLO name (module docstring). ``events``: the program's
    EVENTS, one step per marker or execution; ``counts``: executions per step by the trace's
    op name; ``trace_names``: HLO name -> the trace's name where they differ (GPU async ops,
    ``TraceEvents.async_names``); ``pairs``: async
    ``-start`` -> ``-done`` by HLO name; ``time_on``: the half of a pair the layout times
    ("start" or "done"); ``device``, ``step``: the step to replay."""
    ev = events[(events[schema.DEVICE] == device) & (events[schema.STEP] == step)]
    trace_name, hlo_names = dict(trace_names), {v: k for k, v in trace_names.items()}
    named = {trace_name.get(a, a): trace_name.get(b, b) for a, b in pairs.items()}
    timed = set(named) if time_on == "start" else set(named.values())
    halves = set(named) | set(named.values())
    # a GPU -start runs on its own stream: it neither waits for the core nor makes it wait
    core = _per_execution(ev.assign(_t=_with_gaps(ev, timed if time_on == "start" else ())),
                          "_t", counts)
    core_s = {hlo_names.get(op, op): t for op, t in core.items() if op not in halves}
    core_s.update(dict.fromkeys(pairs, 0.0))
    core_s.update(dict.fromkeys(pairs.values(), 0.0))
    if time_on == "done":  # the transfer: from the -start's start to the -done's end
        ev = async_spans(ev, named)
    flight = _per_execution(ev[ops.named(ev[schema.OP], set(timed))], schema.DURATION_NS,
                            counts)
    start_of = {b: a for a, b in named.items()} if time_on == "done" else {a: a for a in named}
    transfer_s = {hlo_names.get(start_of[op], start_of[op]): t for op, t in flight.items()}
    return core_s, transfer_s
