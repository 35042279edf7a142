"""A trace given by path, found as the trace stage finds one: the newest ``*.xplane.pb`` under
the path, else jax.profiler's Chrome JSON (``opener.find_trace_file``, ``chrome``), the other
hosts' traces of its profile (``hosts.host_traces``), the segments of a trace recorded in
segments (``harness profile``: ``segments.segment_traces``), its XSpace opened, what its device
planes say about the hardware (``device.trace_device``) and what ``harness`` saved beside it
when it captured it (``saved_beside``: ``capture.json``, ``module.hlo.txt``).
``harness.trace.decode`` reads what was found.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.capture.profiler import CAPTURE_FILE, HLO_FILE
from harness.trace.device import Device, trace_device
from harness.trace.hosts import host_traces
from harness.trace.opener import find_trace_file, read_xspace
from harness.trace.segments import segment_traces
from harness.trace.space import Space


@dataclass(frozen=True)
class Located:
    """A trace found under a path: its ``file``, every host's trace of its profile (``hosts``,
    ``file`` alone for one host), its XSpace, its ``device`` (None: the trace has no device
    plane), what ``harness`` saved beside it (``saved_beside``), the trace of each finished
    segment of a trace recorded in segments (``segments``, in order; [] for none) and the
    ``path`` it was found under, as given."""

    file: Path
    hosts: list[Path]
    space: Space
    device: Device | None
    saved: dict = field(default_factory=dict)
    segments: list[Path] = field(default_factory=list)
    path: str = ""

    @property
    def meta(self) -> dict:
        """The meta ``harness`` saved with its capture ({} for a trace captured elsewhere)."""
        return self.saved.get("meta", {})

    @property
    def notes(self) -> list[str]:
        """What a report of it must say of how it was read: a Chrome JSON trace's HLO rebuilt
        from its ops' texts (``harness.trace.chrome``); [] for an XSpace."""
        return list(getattr(self.space, "notes", ()))


def locate(path: str | os.PathLike, space=None) -> Located:
    """The trace at ``path`` (a file, or the newest below a directory, with its segments where
    the directory holds a trace in segments); ``space``: its XSpace, already opened by a caller
    that looked at it first (anything ``read_xspace`` opens)."""
    trace_file = find_trace_file(path)
    found = host_traces(path)
    space, _ = read_xspace(trace_file if space is None else space)
    saved = saved_beside(trace_file, Path(path))
    # a Chrome JSON trace (no *.xplane.pb beside it) is one host's
    return Located(trace_file, found or [trace_file], space, trace_device(space), saved,
                   segment_traces(path), str(path))


def saved_beside(trace_file: Path, root: Path) -> dict:
    """What ``harness`` saved next to a trace it captured (``capture.json``,
    ``module.hlo.txt``), searched from the trace's folder up to ``root``: ``meta``,
    ``cost_analysis``, ``hlo_text`` where found (never above ``root``, a directory given)."""
    out: dict = {}
    folder = trace_file.parent
    # a trace directory keeps its trace at plugins/profile/<run>/: three folders up at most
    for _ in range(4):
        if "meta" not in out and (folder / CAPTURE_FILE).is_file():
            saved = json.loads((folder / CAPTURE_FILE).read_text())
            out.update(meta=saved.get("meta", {}), cost_analysis=saved.get("cost_analysis", {}))
        if "hlo_text" not in out and (folder / HLO_FILE).is_file():
            out["hlo_text"] = (folder / HLO_FILE).read_text()
        if folder == root or folder == folder.parent:
            break
        folder = folder.parent
    return out
