"""Stage 1 for a registered workload whose run is a loop of several programs driven from Python
(``llama_generate``'s request stream, ``workloads.llama.generate.StreamLoop``): the loop run
once in this process under the profiler as ``harness profile`` traces a script
(``harness.capture.segments.SegmentTracer``: segments under a root, each finished one with its
``capture.json``), so that the trace holds every program's executions and the host's time
between them, and ``harness.runs.pipeline.analyze_trace`` reads it as it reads a script's.

A loop (the workload record's ``loop(cfg, mesh, args)``, ``args`` the arguments its ``build``
placed, which the loop reuses rather than place the parameters a second time) has

- ``warm()``: build and compile every program it runs, untraced (the trace holds no
  compilation, as a function's warm-up steps are left out of its capture);
- ``run()``: the loop, once, traced; its result is the caller's (the loop's own record);
- ``programs``: each program's compilation as the trace names it, by the loop's own name for
  it; ``step_program``: the one the report is of;
- ``figures(result, chip)``: the loop's record of that run, predicted on ``chip`` (plain
  JSON-able data).
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path

from harness import schema
from harness.capture import environment
from harness.capture.segments import SegmentTracer

# Seconds per segment of a loop's trace: one segment for any loop a run serves. Segments keep a
# script's trace when its process dies; a loop runs in the harness's own process, whose death
# leaves no report to keep them for.
LOOP_SEGMENT_S = 3600.0


def capture_loop(loop, root: Path, meta: dict, *, devices: Sequence | None = None,
                 segment_s: float = LOOP_SEGMENT_S):
    """``loop.warm()``, then ``loop.run()`` traced in segments of up to ``segment_s`` under
    ``root``; its result. Beside each segment: this process's environment on ``devices``
    (default: every device), the commit, the time and ``meta``."""
    root.mkdir(parents=True, exist_ok=True)
    loop.warm()
    kept = {**environment.environment(devices), **environment.git_state(),
            schema.TIME: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **meta}
    tracer = SegmentTracer(root, segment_s, lambda: kept)
    tracer.begin()
    try:
        return loop.run()
    finally:
        tracer.close()
