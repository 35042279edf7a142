"""A ``MemoryReport`` as text, Markdown or JSON (``FORMATS``): the three peaks in one line,
what holds the peak (book beside compiled, the difference explained), the top buffers at the
peak with their source lines, and the notes."""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.memory.report import MemoryReport, peaks_line
from harness.report import tables
from harness.units import json_text

BUFFER_COLUMNS = (schema.BUFFER, schema.HOLDS, schema.BUFFER_BYTES, schema.SHAPE,
                  schema.SCOPE, schema.SOURCE_LINE)


def _holds(r: MemoryReport) -> pd.DataFrame:
    df = r.holds.copy()
    if len(df):
        df[schema.DIFFERENCE] = [f"{x:+.0%}" if x is not None and x == x else "-"
                                 for x in df[schema.DIFFERENCE]]
    return df


def sections(r: MemoryReport, top: int) -> list[tuple[str, pd.DataFrame]]:
    out = []
    if len(r.holds):
        out.append(("What holds the peak: the book's model beside the compiled peak",
                    _holds(r)))
    if len(r.buffers):
        rows = r.buffers.head(top) if top else r.buffers
        out.append((f"Buffers live at the compiled peak (top {len(rows)} of "
                    f"{len(r.buffers)}, {r.buffers[schema.BUFFER_BYTES].sum():.0f} bytes)",
                    rows[[c for c in BUFFER_COLUMNS if c in rows.columns]]))
    return out


def to_text(r: MemoryReport, top: int = 20) -> str:
    parts = [f"{r.title}: {r.program or 'program'} ({r.compiler})\n" if r.compiler
             else f"{r.title}\n", peaks_line(r) + "\n"]
    if r.measured is None and r.measured_note:
        parts.append(f"measured: {r.measured_note}\n")
    for name, df in sections(r, top):
        parts.append(tables.to_text(df, title=name))
    parts += [f"note: {n}\n" for n in r.notes]
    return "".join(parts)


def to_markdown(r: MemoryReport, top: int = 30) -> str:
    out = [f"# Memory: {r.title}\n\n", f"**{peaks_line(r)}**\n\n"]
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
