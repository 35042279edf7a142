"""A compute-bound verdict (``predictions.training``'s conditions in one node or slice,
``predictions.thresholds``' past it) and how its numbers read.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """training.md's compute-bound condition for one layout: ``have`` against ``need``
    (``have > need`` is compute-bound, except TP: ``have < need``), and the condition in words."""

    strategy: str
    have: float
    need: float
    bound: str      # "compute" | "comm"
    condition: str


def _num(x: float) -> str:
    """850, 2,550, 16.9: whole numbers from 100 up, three figures below."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
