"""How ``harness`` starts the profiler, and what it saves beside a trace it made, in one place
for every capture: a function's steps (``harness.capture.steps``) and a script's segments, made
inside the script's own process (``harness.capture.segments``), which is why this module imports
nothing but the standard library (jax inside the functions, when they run).
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

CAPTURE_FILE = "capture.json"  # beside a trace harness made: {"meta": ..., "cost_analysis": ...}
HLO_FILE = "module.hlo.txt"    # beside it too: the traced program's optimized HLO

# ProfileOptions fields (jax.profiler, jax 0.4.3x on) that make a trace cheap; a jax without a
# field, or without ProfileOptions, traces with its defaults. Host tracer level 1 still records
# the CPU runtime's per-op events and the step annotations, and the host's launch of each
# execution (PjRt's Execute), which the waits for dispatch are read from
# (harness.trace.host_events): level 1 is the cheapest that does, at no cost beyond the ops'
# own events; level 0 loses the ops.
LEAN_PROFILE = {"python_tracer_level": 0, "host_tracer_level": 1}


def lean_profile_options():
    """``jax.profiler.ProfileOptions`` set to ``LEAN_PROFILE`` (None where jax has none)."""
    import jax

    make = getattr(jax.profiler, "ProfileOptions", None)
    if make is None:
        return None
    opts = make()
    for name, value in LEAN_PROFILE.items():
        if hasattr(opts, name):
            setattr(opts, name, value)
    return opts


def start_lean_trace(out: Path) -> None:
    """Start the profiler into ``out`` with ``lean_profile_options`` where jax accepts them."""
    import jax

    opts = lean_profile_options()
    if opts is not None:
        try:
            jax.profiler.start_trace(str(out), profiler_options=opts)
            return
        except TypeError:  # a start_trace without profiler_options
            log.debug("start_trace takes no profiler_options; tracing with defaults")
    jax.profiler.start_trace(str(out))
