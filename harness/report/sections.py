"""A run report's optional sections, after its tables: one registry (``SECTIONS``, in the order
every format shows them) that each format's renderer (``harness.report.document``) loops over.

A section registers one ``Section`` entry here and nothing else changes: the key of its figures
in the run's meta and JSON, whether a run has it, and its renderer for each format, made from
its module's own functions (memory: issue 56; serving loop: issue 55; routing: issue 54).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness import schema
from harness.report import memory, routing, serving_loop

Pngs = Mapping[str, bytes]  # the report's plots as drawn, by file name ({} without plots)


def _no_columns(r) -> list[str]:
    return []


def _text(lines: Callable[[object], list[str]]) -> Callable[[object], str]:
    """A text renderer from a section's ``lines(run)``: each line ended by a newline."""
    return lambda r: "".join(f"{line}\n" for line in lines(r))


@dataclass(frozen=True)
class Section:
    """One optional section. ``key``: where its figures live in the run's meta, and its key in
    the JSON report; ``has(run)``: does the run show it (one that says why it is missing has
    it always); ``text(run)``, ``markdown(run, pngs)``, ``html(run, pngs)``: the section in
    each format (``pngs``: the plots drawn, for one it shows); ``json(run)``: its JSON object
    (None: none of its own, its figures are in the meta); ``replaces_meta``: that object
    stands in the meta entry's place, beside the meta and left out of it (else it follows the
    tables, the meta entry kept); ``legend(run)``: the columns its text tables show, for the
    text report's one legend."""

    key: str
    has: Callable[[object], bool]
    text: Callable[[object], str]
    markdown: Callable[[object, Pngs], str]
    html: Callable[[object, Pngs], str]
    json: Callable[[object], dict] | None = None
    replaces_meta: bool = False
    legend: Callable[[object], list[str]] = _no_columns


SECTIONS = (
    Section(schema.MEMORY, has=lambda r: True, text=memory.to_text,
            markdown=lambda r, pngs: memory.to_markdown(r, png=memory.MEMORY_PNG in pngs),
            html=lambda r, pngs: memory.to_html(r, png=pngs.get(memory.MEMORY_PNG)),
            json=memory.to_json, replaces_meta=True, legend=memory.columns),
    Section(serving_loop.LOOP, has=lambda r: serving_loop.of(r) is not None,
            text=_text(serving_loop.lines),
            markdown=lambda r, pngs: serving_loop.to_markdown(r),
            html=lambda r, pngs: serving_loop.to_html(r)),
    Section(schema.ROUTING, has=lambda r: routing.of(r) is not None, text=_text(routing.lines),
            markdown=lambda r, pngs: routing.to_markdown(r),
            html=lambda r, pngs: routing.to_html(r), json=routing.to_json),
)


def shown(r) -> list[Section]:
    """The sections ``r`` has, in order."""
    return [s for s in SECTIONS if s.has(r)]


def json_objects(r, replacing: bool) -> dict:
    """key -> JSON object of the sections ``r`` has whose object replaces their meta entry
    (``replacing``), or follows the tables (not)."""
    return {s.key: s.json(r) for s in shown(r)
            if s.json is not None and s.replaces_meta == replacing}
