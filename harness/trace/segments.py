"""One host's trace recorded in segments (``harness profile``: ``harness.capture.segments``), read
as one trace: every segment's EVENTS on the first segment's clock, steps numbered on.

Each segment is a profiling session of its own (``segment-000/plugins/profile/<session>/``), so
its events' times count from its own start: the ``Task Environment`` plane of each says when it
started (``profile_start_time``, ns since the epoch), and segment ``k``'s times move by its start
less the first's. Each numbers its steps from 0; segment ``k``'s come after ``k - 1``'s. Several
hosts' traces of one session are another matter (``harness.trace.hosts``).
"""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.capture.segments import SEGMENT_PREFIX
from harness.trace.device import plane_stats
from harness.trace.opener import TRACE_SUFFIX

SESSION_PLANE = "Task Environment"  # the profiler session's plane: when it started and stopped
WINDOW_STATS = ("profile_start_time", "profile_stop_time")  # ns since the epoch


def segment_number(folder: Path) -> int | None:
    """``k`` of a segment's folder (``harness.capture.segments.segment_dir``; None for any
    other folder)."""
    rest = folder.name.removeprefix(SEGMENT_PREFIX)
    return int(rest) if folder.name.startswith(SEGMENT_PREFIX) and rest.isdigit() else None


def segment_traces(root) -> list[Path]:
    """The trace of each finished segment under the folder ``root``, in order (the segment a
    process died in has none); [] where ``root`` holds no segments (or is a file)."""
    root = Path(root)
    if not root.is_dir():
        return []
    folders = sorted((k, d) for d in root.iterdir()
                     if d.is_dir() and (k := segment_number(d)) is not None)
    found = [min(d.rglob(f"*{TRACE_SUFFIX}"), default=None) for _, d in folders]
    return [f for f in found if f is not None]


def session_window(space) -> tuple[int | None, int | None]:
    """When a trace's profiling session started and stopped recording (ns since the epoch;
    None where the trace does not say)."""
    plane = next((p for p in space.planes if p.name == SESSION_PLANE), None)
    stats = plane_stats(plane) if plane is not None else {}
    found = [stats.get(name) for name in WINDOW_STATS]
    return tuple(int(t) if isinstance(t, int) and t > 0 else None for t in found)


def merge_segments(parts: list, starts: list[int | None], label: str):
    """The ``TraceEvents`` of segments (``parts``, in order; ``starts``: each one's
    ``session_window`` start) as one trace's: times on the first one's clock (a segment whose start
    is unknown keeps its own), steps numbered on from the last one's, programs, program ids and
    ops categorical over every segment's names."""
    import pandas as pd
    from pandas.api.types import union_categoricals

    from harness.trace.load import TraceEvents

    first = next((s for s in starts if s is not None), 0)
    frames, hosts, next_step = [], [], 0
    for part, start in zip(parts, starts):
        ev = part.events
        shift = (start - first) if start is not None else 0
        frames.append(ev.assign(**{schema.START_NS: ev[schema.START_NS] + shift,
                                   schema.STEP: ev[schema.STEP] + next_step}))
        if part.host is not None:  # the host's launches, copies, annotations: the same clock
            hosts.append(part.host.assign(**{schema.START_NS: part.host[schema.START_NS] + shift}))
        if len(ev):
            next_step += int(ev[schema.STEP].max()) + 1
    merged = pd.concat(frames, ignore_index=True)
    for col in (schema.PROGRAM, schema.PROGRAM_ID, schema.OP):
        if col in merged.columns:
            merged[col] = union_categoricals([f[col].astype("category") for f in frames])
    async_names = {k: v for p in parts for k, v in p.async_names.items()}
    return TraceEvents(merged, parts[0].format, label, async_names,
                       all(p.stepped for p in parts), host=_hosts(hosts))


def _hosts(hosts: list):
    """The segments' host events as one table, sorted by start (None where none was read)."""
    import pandas as pd
    from pandas.api.types import union_categoricals

    if not hosts:
        return None
    out = pd.concat(hosts, ignore_index=True)
    for col in out.columns:  # a name column is categorical in each segment: over them all
        if isinstance(hosts[0][col].dtype, pd.CategoricalDtype):
            out[col] = union_categoricals([h[col].astype("category") for h in hosts])
    return out.sort_values(schema.START_NS, kind="stable").reset_index(drop=True)
