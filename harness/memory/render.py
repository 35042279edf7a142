"""A ``MemoryReport`` as text, Markdown or JSON (``FORMATS``): the three peaks in one line,
what holds the peak (book beside compiled, the difference explained), the top buffers at the
peak with their source lines, and the notes."""
from __future__ import annotations

from harness.errors import HarnessError
from harness.memory.report import MemoryReport, compiled_line, peaks_line
from harness.report import tables
from harness.report.memory import sections
from harness.units import json_text


def to_text(r: MemoryReport, top: int = 20) -> str:
    parts = [f"{r.title}: {r.program or 'program'} ({r.compiler})\n" if r.compiler
             else f"{r.title}\n", peaks_line(r) + "\n"]
    parts += [compiled_line(r) + "\n"] if compiled_line(r) else []
    if r.measured is None and r.measured_note:
        parts.append(f"measured: {r.measured_note}\n")
    for name, df in sections(r, top):
        parts.append(tables.to_text(df, title=name))
    parts += [f"note: {n}\n" for n in r.notes]
    return "".join(parts)


def to_markdown(r: MemoryReport, top: int = 30) -> str:
    out = [f"# Memory: {r.title}\n\n", f"**{peaks_line(r)}**\n\n"]
    out += [f"{compiled_line(r)}\n\n"] if compiled_line(r) else []
    if r.measured is None and r.measured_note:
        out.append(f"_measured: {r.measured_note}_\n\n")
    for name, df in sections(r, top):
        out.append(f"## {name}\n\n" + tables.to_markdown(df) + "\n")
    out += [f"> {n}\n>\n" for n in r.notes]
    return "".join(out)


def to_json(r: MemoryReport, top: int = 0) -> str:
    return json_text(r.to_dict(), indent=1) + "\n"


FORMATS = {"text": to_text, "md": to_markdown, "json": to_json}


def render(r: MemoryReport, fmt: str = "text", top: int = 20) -> str:
    if fmt not in FORMATS:
        raise HarnessError(f"unknown memory format {fmt!r}; choose from {sorted(FORMATS)}")
    return FORMATS[fmt](r, top)
