"""A trace recorded in segments (``harness profile``), decoded as one trace for
``harness.runs.pipeline.analyze_trace``: each finished segment decoded on its own, as any trace
is (``harness.runs.decode.decode``), their EVENTS merged (``harness.trace.segments``), the
HLO of every program that ran in any of them.

A segment in which no XLA op ran (the script was busy elsewhere) adds nothing; one that cannot be
read is left out with a warning, the others kept.
"""
from __future__ import annotations

import logging
from pathlib import Path

from harness.errors import TraceError
from harness.runs.decode import Decoded, decode
from harness.trace.load import read_xspace
from harness.trace.segments import merge_segments, session_window

log = logging.getLogger(__name__)

# how harness.trace says a trace holds no op: no op line at all (opener), none in them (load)
NO_OPS = ("no XLA op timeline found", "has no XLA op executions")


def decode_segments(paths: list[Path], where: str, *, warmup_steps: int = 0,
                    **kwargs) -> Decoded:
    """The segments' traces (``paths``, in order; ``where``: the folder holding them) decoded as
    one (``kwargs``: ``decode``'s); ``warmup_steps`` are the first segment's. Raises
    ``TraceError`` when none holds an op."""
    traces, starts, modules, damaged, last = [], [], {}, [], None
    for path in paths:
        space, label = read_xspace(path)
        try:
            part = decode(space, label=label, warmup_steps=0 if traces else warmup_steps,
                          **kwargs)
        except TraceError as e:
            if not any(words in str(e) for words in NO_OPS):
                log.warning("segment %s left out: %s", path, e)
            continue
        traces.append(part.trace)
        starts.append(session_window(space)[0])
        modules.update(part.modules)
        damaged += [d for d in part.damaged if d not in damaged]
        last = part.space
    label = f"{where} ({len(paths)} segments)"
    if not traces:
        raise TraceError(f"{label}: no segment holds an XLA op execution")
    return Decoded(last, label, merge_segments(traces, starts, label), modules, damaged)
