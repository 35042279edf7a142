"""Before running: ``harness plan``'s layouts of a workload ranked (compiled ahead of time,
priced at the roofline, set beside the book's verdict; ``layouts``, ``rank``, ``request``;
pipelines searched within the memory that fits, priced by the book first: ``pipeline``,
``pipeline_book``),
``predict-hlo``'s ahead-of-time prediction (``compiles``, ``workload``, ``predict``, ``fit``,
``remat``, ``render``) and ``harness predict``'s answers from the book (``book``).

The names below are re-exported lazily, as ``harness`` re-exports its own: importing a light
submodule (``harness.plan.book``) imports neither pandas nor the compilers.
"""
from __future__ import annotations

import importlib

# name -> module that defines it
EXPORTS: dict[str, str] = {
    "LAYOUTS": "harness.plan.layouts", "Candidate": "harness.plan.layouts",
    "candidates": "harness.plan.layouts", "spans": "harness.plan.layouts",
    "PLANNABLE": "harness.plan.rank", "Plan": "harness.plan.rank",
    "Setting": "harness.plan.rank", "plan": "harness.plan.rank", "ranked": "harness.plan.rank",
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module 'harness.plan' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
