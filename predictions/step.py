"""A workload's step as the book models it: ``Analytic`` and its ``BookPart``s.

Each workload's book model (``workloads.Workload.book(cfg, mesh, chip) -> Analytic``) gives the
step's useful FLOPs over all devices (for MFU) and the book's step-time estimate on a chip.

``Analytic.parts`` splits the book's step into the parts ``harness.plan.predict.book_gap`` sets the
per-op sum against (``PARTS``): the matmul FLOPs at peak, the collectives by the sharding
chapter's formulas, the memory traffic the book counts (weights and KV reads in inference; none in
training), and the overlap the book assumes (its step is a max over terms, not their sum).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from predictions import hardware

MATMUL, COLLECTIVE, MEMORY, OVERLAP = PARTS = ("matmul", "collective", "memory", "overlap")


@dataclass(frozen=True)
class BookPart:
    """One part of the book's step: seconds, and the work behind them per device (FLOPs for
    matmul, bytes for collective and memory; None for overlap)."""

    seconds: float
    work: float | None
    formula: str


@dataclass(frozen=True)
class Analytic:
    """The book's figures for one step: ``model_flops`` over all devices (the MFU numerator),
    ``analytic_s`` the step time on a chip (None where the book gives none), and how each is
    counted."""

    model_flops: float | None
    analytic_s: float | None
    formula: str
    flops_formula: str = ""             # how model_flops is counted
    book_flops: float | None = None     # the book's 6P (or 2P) count, for comparison
    parts: dict = field(default_factory=dict)  # PARTS -> BookPart (harness.plan.predict.book_gap)
    bus_bytes: float | None = None      # a collective's bytes per device over links (busbw's)


def with_overlap(total_s: float, parts: dict[str, BookPart], why: str) -> dict[str, BookPart]:
    """``parts`` plus the overlap part: the book's step minus the sum of its terms (<= 0).
    The book's step is a max over terms, not their sum (`roofline.md`, `training.md`)."""
    rest = sum(p.seconds for p in parts.values())
    return {**parts, OVERLAP: BookPart(total_s - rest, None, why)}


def book_dtype(value: str) -> str:
    """The book's dtype name (bf16 / fp32 / ...) for a workload's dtype field; bf16 when the
    name is not one the book has (`hardware.PEAK_COLUMN`)."""
    return hardware.PEAK_COLUMN.get(str(value).lower(), "bf16")
