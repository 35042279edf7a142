"""A run report's memory section (issue 56): the three peaks per device side by side (measured,
compiled, the book's), ``memory_analysis()``'s figures, what holds the peak, the top buffers at
it and, in the HTML and Markdown, live bytes over the step.

Every figure is ``harness.memory``'s, made once when the run was (``harness run --memory``:
``harness.memory.report.of_run``, kept in the run's meta under ``schema.MEMORY``) and shown
here as ``harness memory`` shows it (``harness.memory.render``). It costs a second compile
with XLA's dump, so it is opt-in; a run without it says so, and how to get it.
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.record.memory import MemoryReport, compiled_line, peaks_line
from harness.report import page, tables
from harness.report.plots import FONT, _figure, _png, timed
from harness.units import BINARY_BYTES, fmt_bytes, scale_of

MEMORY_PNG = "memory.png"
TOP = 10  # buffers at the peak a run's report lists (harness memory lists them all)


BUFFER_COLUMNS = (schema.BUFFER, schema.HOLDS, schema.BUFFER_BYTES, schema.SHAPE,
                  schema.SCOPE, schema.SOURCE_LINE)


def _holds(r: MemoryReport) -> pd.DataFrame:
    df = r.holds.copy()
    if len(df) and df[schema.DIFFERENCE].isna().all():  # no book model: nothing to set beside
        return df.drop(columns=[schema.DIFFERENCE])
    if len(df):
        df[schema.DIFFERENCE] = [f"{x:+.0%}" if x is not None and x == x else "-"
                                 for x in df[schema.DIFFERENCE]]
    return df


def sections(r: MemoryReport, top: int) -> list[tuple[str, pd.DataFrame]]:
    """The tables of ``r`` (what holds the peak; the top ``top`` buffers at it), as a run's
    report and ``harness memory`` (``harness.memory.render``) show them."""
    out = []
    if len(r.holds):
        out.append(("What holds the peak: the book's model beside the compiled peak" if r.book
                    else "What holds the compiled peak (no book model)", _holds(r)))
    if len(r.buffers):
        rows = r.buffers.head(top) if top else r.buffers
        out.append((f"Buffers live at the compiled peak (top {len(rows)} of "
                    f"{len(r.buffers)}, {fmt_bytes(r.buffers[schema.BUFFER_BYTES].sum())})",
                    rows[[c for c in BUFFER_COLUMNS if c in rows.columns]]))
    return out


def of(r) -> MemoryReport | None:
    """The run's memory report, where it was made (``schema.MEMORY`` in its meta)."""
    d = (getattr(r, "meta", None) or {}).get(schema.MEMORY)
    return MemoryReport.from_dict(d) if isinstance(d, dict) and d else None


def absent(r) -> str:
    """One line for a run without the section: XLA's figure where the capture kept one and no
    note gives it already (a CPU run's, ``harness.capture.memory.host_note``), what is missing,
    and how to get it (a user's own program has no book model)."""
    need = r.meta.get(schema.MEMORY_NEEDED_BYTES) if r.meta.get("platform") != "cpu" else None
    have = (f"XLA's memory_analysis gives {fmt_bytes(need)} per device "
            f"(arguments + outputs - aliased + temporaries); " if need else "")
    if r.meta.get(schema.TRACE_FILE) and not r.meta.get(schema.WORKLOAD):
        return (f"memory: {have}a trace holds no buffer assignment: the peaks and the buffers "
                f"at the peak come from a compile with XLA's dump (harness memory WORKLOAD, "
                f"or harness.analyze(fn, *args, memory=True) for your own function)")
    if r.meta.get(schema.WORKLOAD):
        where = getattr(r, "path", None) or "RUN"
        return (f"memory: {have}the peaks side by side (measured, compiled, the book's) and the "
                f"buffers at the peak were not computed (a second compile, with XLA's dump): "
                f"harness run --memory adds them, harness memory {where} prints them")
    return (f"memory: {have}the book has no model of a user's own program's memory; the "
            f"compiled peak and the buffers at it were not computed (a second compile, with "
            f"XLA's dump): harness.analyze(fn, *args, memory=True) adds them")


def lines(m: MemoryReport) -> list[str]:
    """The section's lines: the three peaks, memory_analysis, why none is measured."""
    out = [f"memory of {m.title}" + (f": {m.program} ({m.compiler})" if m.compiler else ""),
           peaks_line(m), compiled_line(m)]
    out.append(f"measured: {m.measured_note}" if m.measured is None and m.measured_note else "")
    return [line for line in out if line]


def columns(r, top: int = TOP) -> list[str]:
    """The columns the section's tables show (for the report's one legend)."""
    m = of(r)
    return [c for _, df in sections(m, top) for c in tables.shown(df).columns] if m else []


def to_text(r, top: int = TOP) -> str:
    m = of(r)
    if m is None:
        return absent(r) + "\n"
    parts = [f"{line}\n" for line in lines(m)]
    parts += [tables.to_text(df, title=name) for name, df in sections(m, top)]
    return "".join(parts + [f"memory note: {n}\n" for n in m.notes])


def to_markdown(r, top: int = TOP, png: bool = False) -> str:
    m = of(r)
    if m is None:
        return f"\n## Memory\n\n{absent(r)}\n"
    out = ["\n## Memory\n\n"] + [f"{line}  \n" for line in lines(m)]
    out += [f"\n![memory]({MEMORY_PNG})\n"] if png else []
    out += [f"\n### {name}\n\n" + tables.to_markdown(df) for name, df in sections(m, top)]
    out += ["\n"] + [f"> {n}\n>\n" for n in m.notes]
    return "".join(out)


def to_html(r, top: int = TOP, png: bytes | None = None) -> str:
    m = of(r)
    if m is None:
        return "<h2>Memory</h2>" + page.paragraphs([absent(r)], "note")
    body = ["<h2>Memory</h2>", page.paragraphs(lines(m))]
    body += [page.image(MEMORY_PNG, png)] if png else []
    body += [f"<h3>{page.esc(name)}</h3>" + page.table(df) for name, df in sections(m, top)]
    return "".join(body + [page.paragraphs(m.notes, "note")])


def to_json(r) -> dict:
    """The section in a run's JSON: the memory report's dict, or a note saying why none."""
    m = of(r)
    return m.to_dict() if m is not None else {"note": absent(r)}


@timed
def timeline_png(m: MemoryReport) -> bytes | None:
    """Live bytes at each point of the compiled schedule (``schema.TIMELINE``), with XLA's
    peak, the book's model and the device's capacity where known; None without a
    timeline."""
    t = m.timeline
    if t is None or not len(t):
        return None
    pos, live = t[schema.POSITION].to_numpy(float), t[schema.LIVE_BYTES].to_numpy(float)
    marks = {"XLA's peak (live buffers)": m.live_peak,
             "the book's model": sum(m.book.values()) if m.book else None,
             "device capacity": m.capacity}
    unit, scale = scale_of(max([live.max(), *(v for v in marks.values() if v)]), BINARY_BYTES)
    fig, ax = _figure((7, 3.6), margins=(0.9, 0.25, 0.95, 0.4))
    ax.step(pos, live / scale, where="post", color="tab:blue", lw=1.2, label="live bytes")
    for (label, value), style in zip(marks.items(), ("--", "-.", ":")):
        if value:
            ax.axhline(value / scale, color="0.3", ls=style, lw=1,
                       label=f"{label} {fmt_bytes(value)}")
    ax.set_xlim(pos.min(), pos.max())
    ax.set_ylim(0, None)
    ax.set_xlabel("position in the compiled schedule (HLO instruction)", fontsize=FONT + 1)
    ax.set_ylabel(f"live bytes per device ({unit})", fontsize=FONT + 1)
    ax.set_title(f"Live bytes over the step: {m.program or 'the program'}", fontsize=FONT + 2)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              frameon=False)
    return _png(fig)


def timeline_pngs(r) -> dict[str, bytes]:
    """``{MEMORY_PNG: png}`` for a run with a memory timeline, else {}."""
    m = of(r)
    png = timeline_png(m) if m is not None else None
    return {MEMORY_PNG: png} if png else {}
