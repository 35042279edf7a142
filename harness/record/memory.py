"""A run's memory report as data (``harness.memory`` makes it, a run keeps it in its meta
under ``schema.MEMORY``, ``harness.report.memory`` and ``harness memory`` show it): the peaks
per device, what holds them, the buffers at the peak, and its one-line summaries."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from harness import schema, units


@dataclass
class MemoryReport:
    """Per device. ``compiled``: ``memory_analysis()`` (``workloads.aot.MEMORY_FIELDS`` keys);
    ``live_peak``: the bytes live at XLA's peak (the buffers' sum); ``book``: the book's terms;
    ``measured``/``measured_note``: the allocator's peak or why there is none;
    ``capacity``: what a device holds, where known; ``refused``: the compiler's
    out-of-memory message where it refused the program."""

    title: str
    program: str = ""
    compiler: str = ""
    compiled: dict = field(default_factory=dict)
    live_peak: int | None = None
    book: dict = field(default_factory=dict)
    measured: int | None = None
    measured_note: str = ""
    capacity: int | None = None
    refused: str = ""
    holds: pd.DataFrame = field(default_factory=pd.DataFrame)
    buffers: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        """Whether the compiled peak fits ``capacity`` (None: either unknown)."""
        if self.refused:
            return False
        peak = self.live_peak or self.compiled.get("peak")
        return None if peak is None or self.capacity is None else peak <= self.capacity

    def to_dict(self) -> dict:
        frame = lambda df: json.loads(df.to_json(orient="records")) if len(df) else []  # noqa
        return {"title": self.title, "program": self.program, "compiler": self.compiler,
                "compiled": self.compiled, "live_peak_bytes": self.live_peak,
                "book": self.book, "measured_bytes": self.measured,
                "measured_note": self.measured_note, "capacity_bytes": self.capacity,
                "fits": self.fits, "refused": self.refused, "holds": frame(self.holds),
                "buffers": frame(self.buffers), "timeline": frame(self.timeline),
                "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict) -> MemoryReport:
        """A report as a run keeps it (``to_dict``); missing fields take their defaults."""
        frame = lambda rows, cols: pd.DataFrame(rows or [], columns=list(cols))  # noqa: E731
        return cls(title=d.get("title", ""), program=d.get("program", ""),
                   compiler=d.get("compiler", ""), compiled=d.get("compiled") or {},
                   live_peak=d.get("live_peak_bytes"), book=d.get("book") or {},
                   measured=d.get("measured_bytes"), measured_note=d.get("measured_note", ""),
                   capacity=d.get("capacity_bytes"), refused=d.get("refused", ""),
                   holds=frame(d.get("holds"), schema.HOLDS_TABLE),
                   buffers=frame(d.get("buffers"), schema.BUFFERS),
                   timeline=frame(d.get("timeline"), schema.TIMELINE),
                   notes=list(d.get("notes") or []))


# memory_analysis()'s figures as a report names them, in the order it says them
ANALYSIS = (("arguments", "arguments"), ("outputs", "outputs"), ("aliased", "aliased"),
            ("temporaries", "temporaries"), ("code", "code"),
            ("host_temporaries", "host temporaries"), ("peak", "peak_memory_in_bytes"))


def compiled_line(r: MemoryReport) -> str:
    """One line: the compiled program's ``memory_analysis()`` per device, its figures named
    ("" where the compiler gave none)."""
    parts = [f"{word} {units.fmt_bytes(r.compiled[key])}" for key, word in ANALYSIS
             if r.compiled.get(key) is not None]
    return f"compiled (memory_analysis, per device): {', '.join(parts)}" if parts else ""


def peaks_line(r: MemoryReport) -> str:
    """One line: the three peaks side by side."""
    book = sum(r.book.values()) if r.book else None
    fmt = lambda b: units.fmt_bytes(b) if b is not None else "-"  # noqa: E731
    compiled = r.live_peak if r.live_peak is not None else r.compiled.get("peak")
    line = (f"peak per device: measured {fmt(r.measured)}, compiled {fmt(compiled)}, "
            f"book {fmt(book)}")
    if book and compiled:
        line += f" (compiled {compiled / book - 1:+.0%} vs book)"
    if r.capacity is not None:
        line += f"; a device holds {fmt(r.capacity)}: " + ("fits" if r.fits else
                                                           "DOES NOT FIT")
    return line
