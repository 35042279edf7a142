"""scaling-harness: capture -> parse -> predict -> join -> report -> store.

``from harness import analyze`` and the stage functions below are re-exported lazily: importing
``harness`` imports neither jax nor pandas, so ``harness.devices`` can still set ``XLA_FLAGS``;
each name loads its module on first use. ``harness.compare(a, b, rule)`` is the verdict of a
candidate run ``b`` against a baseline ``a`` (``harness.regress.judge``; ``harness compare``).
"""
from __future__ import annotations

import importlib

from harness.devices import quiet_absent_libtpu

__version__ = "0.1.0"

# name -> module that defines it, in pipeline order (docs/pipeline.md). No name here may be a
# subpackage's or module's of harness: importing that one would rebind it. So ``capture`` is
# not listed: it is the stage package ``harness.capture``, not a re-exported function.
EXPORTS: dict[str, str] = {
    "load_events": "harness.trace",
    "op_times": "harness.measure.ops",
    "parse_module": "harness.hlo",
    "hlo_costs": "harness.hlo",
    "summary": "harness.analysis.gaps",
    "render": "harness.report",
    "Run": "harness.record",
    "analyze": "harness.runs.pipeline",  # capture fn(*args, **kwargs) and analyse it
    "analyze_trace": "harness.runs.pipeline",
    "memory_of": "harness.memory.ahead",  # fn's memory ahead of time, on a named chip
    "run_workload": "harness.runs.workload",
    "compare": "harness.regress.judge",
}

__all__ = sorted(EXPORTS)

# Used as a library (``harness.analyze`` from a script), an installed libtpu is kept as quiet on
# a host without TPUs as the ``harness`` command keeps it; the user's JAX platform stays theirs.
quiet_absent_libtpu()


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
