"""Profiler trace -> EVENTS: one row per device op execution, attributed to a measured step.

``load_events(source)`` accepts a ``*.xplane.pb`` path, a directory holding one (searched
recursively, newest first), or the serialized bytes. The format is detected per trace from a
registry (``harness.trace.formats.FORMATS``): CPU (`/host:CPU` thread lines), TPU (`/device:TPU:n`,
line ``XLA Ops``) and GPU (`/device:GPU:n`, per-stream kernel lines).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from harness import schema
from harness.errors import TraceError
from harness.trace.formats import FORMATS, Columns
from harness.trace.host_events import host_events
from harness.trace.opener import (  # noqa: F401 (re-exported: where callers have found them)
    TRACE_SUFFIX,
    detect_format,
    find_trace_file,
    read_xspace,
)
from harness.trace.space import Space


def _categorical(values, names: dict, found: tuple | None = None) -> pd.Categorical:
    """Names (or integer codes translated by ``names``) as a Categorical, its categories in
    order of first appearance; ``found``: ``pd.factorize(values)``, where already made."""
    codes, uniques = found if found is not None else pd.factorize(_plain(values))
    labels = np.asarray([str(names.get(u, u)) for u in uniques.tolist()], dtype=object)
    label_codes, categories = pd.factorize(labels)
    return pd.Categorical.from_codes(label_codes[codes] if len(codes) else codes,
                                     categories=categories)


def _plain(values) -> np.ndarray:
    arr = np.asarray(values)
    return arr if arr.dtype.kind in "iu" else np.asarray(values, dtype=object)


def _steps(step: np.ndarray, warmup_steps: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(each row's step numbered from 0, -1 where dropped; the rows kept, None for all).
    Dropped: rows outside every step (-1) and those of the first ``warmup_steps`` steps."""
    counted = step[step >= 0]
    steps = (np.flatnonzero(np.bincount(counted)) if len(counted) and counted.max() < 1 << 24
             else np.unique(counted))[warmup_steps:]  # (step numbers: a count, not a sort)
    if not len(steps):
        return np.full(len(step), -1, np.int64), np.zeros(0, np.int64)
    low, high = int(steps[0]), int(steps[-1])
    if high - low < 1 << 24:  # step numbers as captures give them: a lookup table
        rank = np.full(high - low + 2, -1, np.int64)  # the last one: -1 for the rest
        rank[steps - low] = np.arange(len(steps))
        number = rank[np.where((step >= low) & (step <= high), step - low, high - low + 1)]
    else:
        at = np.searchsorted(steps, step)
        number = np.where(steps[np.minimum(at, len(steps) - 1)] == step, at, -1)
    keep = None if (number >= 0).all() else np.flatnonzero(number >= 0)
    return number, keep


@dataclass(frozen=True)
class TraceEvents:
    """A trace's EVENTS with where they came from: the format that read them, the source label,
    the HLO text's name of each async op -> the name the trace gives it
    (``fusion-start.3`` -> ``loop_..._fusion.7``; GPU traces), and whether the trace had step
    markers (without them, ``harness.measure.ops.by_execution`` numbers each program's
    executions)."""

    events: pd.DataFrame
    format: str  # the name of its format in harness.trace.formats.FORMATS, or hosts.MERGED
    source: str
    async_names: dict = field(default_factory=dict)
    stepped: bool = True  # steps from step markers; False: one step per program execution
    # what the host did that a device can wait on (schema.HOST_EVENTS, harness.trace.host_events;
    # None: not read)
    host: pd.DataFrame | None = None

    @cached_property
    def ran(self) -> tuple:
        """The compilations that ran, most device time first
        (``harness.measure.programs.programs_ran`` of ``events``), found once: the decode, the
        check of the program asked for and the analysis each read them."""
        from harness.measure.programs import programs_ran

        return tuple(programs_ran(self.events))

    @property
    def shares_cores(self) -> bool:
        """Whether the trace's devices are threads on the host's shared cores (its format
        says; a name that is no single-host format, as a merged multi-host trace, does not):
        then an op's time is its share of the host (``harness.measure.shares``)."""
        known = FORMATS.get(self.format)
        return bool(known and known.shares_cores)

    @property
    def async_time_on(self) -> str:
        """The half of an async pair ("start" or "done") the trace gives the pair's time to
        (its format says; "start" for any other): ``harness.hlo.hlo_costs(async_on=...)``."""
        known = FORMATS.get(self.format)
        return known.async_time_on if known else "start"


Schedule = Callable[[str], "Sequence[tuple[str, str, str]] | None"]


def load_events(source: str | os.PathLike | bytes | Space, *, warmup_steps: int = 0,
                schedule_of: Schedule | None = None) -> pd.DataFrame:
    """The EVENTS table of a trace (``read_events(...).events``)."""
    return read_events(source, warmup_steps=warmup_steps, schedule_of=schedule_of).events


def read_events(source: str | os.PathLike | bytes | Space, *, warmup_steps: int = 0,
                schedule_of: Schedule | None = None, label: str | None = None) -> TraceEvents:
    """The EVENTS table of a trace: one row per op execution inside a measured step, with the
    format that read it and the source's label.

    Op executions outside every step annotation (warm-up, compilation) are dropped; so are the
    first ``warmup_steps`` annotated steps. Steps are renumbered from 0. ``schedule_of(program)``:
    that program's ops in order (``harness.hlo.schedule``), for a GPU trace whose CUDA-graph
    kernels must be attributed to ops. ``source`` may be a ``Space`` already opened (``label``
    names it).
    """
    space, read_label = read_xspace(source)
    label = label or read_label
    format_name = detect_format(space, label)
    trace_format = FORMATS[format_name]
    try:
        cols: Columns = (trace_format.extract(space, schedule_of) if trace_format.uses_hlo
                         else trace_format.extract(space))
    except DecodeError as e:  # lines are decoded lazily, so corruption inside one shows here
        raise TraceError(f"{label}: corrupt XSpace line ({e})") from None
    n = len(cols.op)
    if not n:
        raise TraceError(f"{label}: trace has no XLA op executions ({format_name} format)")
    step, keep = _steps(np.asarray(cols.step, dtype=np.int64), warmup_steps)
    if keep is not None and not len(keep):
        raise TraceError(f"{label}: no XLA op executions inside a measured step "
                         f"({format_name} format, warmup_steps={warmup_steps})")
    programs = _plain(cols.program)
    found = pd.factorize(programs)
    # program_id: "" throughout where the format names none; the CPU format codes both
    # columns by run, factorized once
    ids = (_categorical(cols.program_id, cols.program_id_names,
                        found if cols.program_id is cols.program else None)
           if len(cols.program_id) == n else _categorical(np.zeros(n, np.int64), {0: ""}))
    columns = {
        schema.PROGRAM: _categorical(programs, cols.program_names, found),
        schema.PROGRAM_ID: ids,
        schema.OP: _categorical(cols.op, cols.op_names),
        schema.DEVICE: np.asarray(cols.device, dtype=np.int32),
        schema.STEP: step.astype(np.int32),
        schema.START_NS: np.asarray(cols.start_ns, dtype=np.int64),
        schema.DURATION_NS: np.asarray(cols.duration_ns, dtype=np.int64),
    }
    if keep is not None:  # rows outside the measured steps
        columns = {k: v[keep] for k, v in columns.items()}
    df = pd.DataFrame(columns)
    try:
        host = host_events(space)
    except DecodeError as e:
        raise TraceError(f"{label}: corrupt XSpace line ({e})") from None
    return TraceEvents(df, format_name, label, dict(cols.async_names),
                       cols.stepped, host)
