"""A program's memory in one object (``MemoryReport``): the three peaks, what holds them, the
buffers live at the compiled peak, live bytes over the step; made from XLA's dump
(``of_dump``) or by compiling a workload (``of_workload``); rendered as text, md or json, and
as the dict a run keeps under ``schema.MEMORY`` (``to_dict``/``from_dict``)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from harness import schema, units
from harness.hlo import parse_module
from harness.hlo.attrs import HloParseError
from harness.memory import assignment, buffers, peaks
from harness.memory.dump import Dump, compile_dump

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "int8": 1}


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


def of_dump(dump: Dump, title: str, book: dict | None = None, dtype_bytes: int = 2,
            capacity: int | None = None, measured: tuple[int | None, str] = (None, "")
            ) -> MemoryReport:
    """The report of one compiled program's dump (``harness.memory.dump``)."""
    report = MemoryReport(title, dump.program, dump.compiler, dict(dump.memory), None,
                          dict(book or {}), measured[0], measured[1], capacity, dump.refused)
    if dump.refused:
        report.notes.append(f"the compiler refused the program: {dump.refused}")
        return report
    found = assignment.read(dump.assignment, dump.live_range)
    try:
        module = parse_module(dump.hlo) if dump.hlo else None
    except HloParseError as e:
        module = None
        report.notes.append(f"the dumped HLO could not be read ({e}); buffers without ops")
    if found.peak_at is None:
        report.notes.append("the dump holds no live ranges: no buffers at the peak")
    report.live_peak = found.peak_bytes or None
    report.buffers = buffers.at_peak(found, module)
    report.timeline = buffers.timeline(found)
    report.holds = peaks.holds_table(report.buffers, report.book, dtype_bytes)
    note = peaks.footprint_note(report.compiled, report.live_peak)
    report.notes += [note] if note else []
    if found.skipped:
        report.notes.append(f"{found.skipped} line(s) of the dump were not understood; skipped")
    return report


def _capacity(chip: str | None) -> int | None:
    """What a device holds: ``$SCALING_HARNESS_DEVICE_MEMORY``, else the chip's HBM (a CPU's
    share of the host's RAM is not a limit the compiler knows: None)."""
    import os

    from harness.capture.memory import MEMORY_ENV, parse_bytes
    from predictions import hardware

    if os.environ.get(MEMORY_ENV):
        return parse_bytes(os.environ[MEMORY_ENV])
    if chip and chip != "cpu":
        return int(hardware.chip_entry(chip).hbm_bytes)
    return None


def of_workload(name: str, preset: str = "tiny", overrides: dict | None = None,
                mesh: str | None = None, chip: str | None = None) -> MemoryReport:
    """Compile workload ``name`` (for ``chip``'s TPU slice where it is a TPU, else on virtual
    CPU devices) with XLA's dump on, and report its memory beside the book's model."""
    import workloads
    from predictions import hardware
    from workloads.mesh import abstract_mesh, fill_axes, mesh_dims

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    shape = mesh or "x".join("1" for _ in wl.mesh_axes)
    if chip is not None:
        hardware.chip_entry(chip)  # a bad name: one line naming the chips
    tpu_chip = chip if chip and chip.startswith("tpu") else None
    if "=" in shape:  # axes by name (a layout's roles)
        jmesh = abstract_mesh(shape)
    else:             # the book's model needs no devices: a device-free mesh of that shape
        jmesh = abstract_mesh(fill_axes(mesh_dims(shape), len(wl.mesh_axes)), wl.mesh_axes)
    book = wl.memory(cfg, jmesh) if wl.memory is not None else {}
    dump = compile_dump(name, preset, overrides, shape, tpu_chip)
    dtype = getattr(cfg, "param_dtype", None) or getattr(cfg, "dtype", "bfloat16")
    report = of_dump(dump, f"{name} ({preset}) on mesh {shape}, {chip or 'cpu'}", book,
                     DTYPE_BYTES.get(str(dtype), 2), _capacity(chip),
                     (None, "none measured: the program was compiled, not run"))
    if not book:
        report.notes.append(f"{name} has no book model of its memory (Workload.memory)")
    return report


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
