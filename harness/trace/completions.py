"""When an op's work completed on XLA:CPU: an op's time runs from its start to its completion.

XLA:CPU's thunk executor runs some kernels asynchronously: an Eigen matmul splits into tasks on
the intra-op thread pool and returns. Such an op's trace event spans its dispatch only (a
134 MFLOP ``dot`` of an 8-device MLP step: 120 us, 1.1 TFLOP/s on a 2-core host), and its work
runs on pool threads after it, under no op's event; an op that ran beside it then seemed to
have the cores to itself. When the op's work completes, the executor records a marker
``end: <op>`` (``_c``: the flow id the op event gave as ``_p``), on the thread that completed it.

The marker is the completion, except where the thread recorded something just before it (the
last event to end before the marker, nothing else between them, not even a thread-pool task's
start or stop): the op's own event, where the kernel ran inline and the marker follows its
event by the microsecond the profiler takes (then the event's end), or the executor's
continuation, a ``ThunkExecutor::Execute`` event, which started after the op's event ended:
the completing thread first ran the thunks the completion made ready, and only then the
marker's callback (the traces show it: the all-reduce reading a dot's result starts 2 us into
the continuation, and the dot's marker comes after the continuation's end, 90 ms later). Then
the op completed where that event started. ``durations`` gives each op its span from its start
to its completion, never shorter than its event; an op without a marker (the
profiler stopped before its work completed, or a runtime that records none) keeps its event.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MARK_PREFIX = "end: "  # the completion marker of an op's thunk: "end: dot.3"
CONTINUATION = "ThunkExecutor::Execute"  # the executor running the thunks made ready


def kinds(event_names: Mapping[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """The event kinds (metadata ids) of a plane that are completion markers, and those that
    are the executor's runs (continuations)."""
    marks = [k for k, name in event_names.items() if name.startswith(MARK_PREFIX)]
    runs = [k for k, name in event_names.items() if name == CONTINUATION]
    return np.asarray(marks, np.int64), np.asarray(runs, np.int64)


def prior(kind: np.ndarray, start: np.ndarray, end: np.ndarray, marks: np.ndarray,
          runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each marker of one line (``marks``: its rows among the line's events, whose
    ``kind``, ``start`` and ``end`` are given): the start and end of the event that ended last
    before the marker's start (-1, -1: none), and whether it is a ``runs`` event (among events
    ending at once, a run counts as last)."""
    first, last, is_last_run = (np.full(len(marks), -1, np.int64),
                                np.full(len(marks), -1, np.int64), np.zeros(len(marks), bool))
    if not len(marks):
        return first, last, is_last_run
    is_run = np.isin(kind, runs)
    order = np.lexsort((is_run, end))
    at = np.searchsorted(end[order], start[marks], side="left") - 1
    found = at >= 0
    before = order[at[found]]
    first[found], last[found], is_last_run[found] = start[before], end[before], is_run[before]
    return first, last, is_last_run


def durations(start: np.ndarray, duration: np.ndarray, producer: np.ndarray,
              has_producer: np.ndarray, consumer: np.ndarray, at: np.ndarray,
              prior_start: np.ndarray, prior_end: np.ndarray, prior_run: np.ndarray
              ) -> np.ndarray:
    """Each op event's span from its start to its completion (module docstring). Op events:
    ``start``, ``duration``, their flow id ``producer`` (where ``has_producer``); markers:
    their flow id ``consumer``, time ``at`` and what their thread recorded last before them
    (``prior``). An op without a marker keeps its duration."""
    end = start + duration
    if not len(consumer) or not has_producer.any():
        return duration
    order = np.argsort(consumer, kind="stable")
    ids = consumer[order]
    i = order[np.minimum(np.searchsorted(ids, producer), len(ids) - 1)]
    hit = has_producer & (consumer[i] == producer)
    before, run = prior_start[i], prior_run[i]  # (each gathered once: millions of ops)
    own = (before == start) & (prior_end[i] == end) & ~run
    continued = run & (before >= end)
    done = np.where(own, end, np.where(continued, before, at[i]))
    return np.where(hit, np.maximum(end, done), end) - start
