"""A run report's optional sections come from one registry (``harness.report.sections``): a
section registered there shows in every format, after the tables and the sections before it,
and nowhere for a run without it; nothing else changes."""
from __future__ import annotations

import json

import pytest

from harness import schema
from harness.record import Run
from harness.report import document, sections, serving_loop

STORED = "tests/fixtures/runs/format1-matmul"
KEY = "widgets"  # a made-up section's meta and JSON key


def _widgets(r) -> dict | None:
    return r.meta.get(KEY)


WIDGETS = sections.Section(
    KEY, has=lambda r: _widgets(r) is not None,
    text=lambda r: f"widgets: {_widgets(r)['n']}\n",
    markdown=lambda r, pngs: f"\n## Widgets\n\n{_widgets(r)['n']} widgets\n",
    html=lambda r, pngs: f"<h2>Widgets</h2><p>{_widgets(r)['n']} widgets</p>",
    json=lambda r: {"n": _widgets(r)["n"], "shown": True})


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, WIDGETS))


def _run(**meta) -> Run:
    r = Run.load(STORED)
    r.meta.update(meta)
    return r


def test_the_registry_names_each_section_once_in_order():
    assert [s.key for s in sections.SECTIONS] == [schema.MEMORY, serving_loop.LOOP,
                                                  schema.ROUTING]


def test_a_registered_section_shows_in_every_format(registered):
    r = _run(**{KEY: {"n": 7}})
    text = document.render(r, "text")
    # after the memory section (a stored run without it says how to get it), before the legend
    assert text.index("memory: ") < text.index("widgets: 7\n") < text.index("  op: ")
    md = document.render(r, "md", plots=False)
    assert md.endswith("\n## Widgets\n\n7 widgets\n")
    assert md.index("\n## Memory\n") < md.index("\n## Widgets\n")
    html = document.render(r, "html", plots=False)
    assert html.endswith("<h2>Widgets</h2><p>7 widgets</p></body></html>\n")
    got = json.loads(document.render(r, "json"))
    assert list(got)[-1] == KEY and got[KEY] == {"n": 7, "shown": True}
    assert got["meta"][KEY] == {"n": 7}  # it follows the tables: its meta entry kept


def test_a_run_without_the_section_shows_none_of_it(registered):
    r = _run()
    assert "widgets" not in document.render(r, "text")
    assert "Widgets" not in document.render(r, "md", plots=False)
    assert "Widgets" not in document.render(r, "html", plots=False)
    assert KEY not in json.loads(document.render(r, "json"))


def test_the_memory_section_stands_beside_the_meta_in_json():
    got = json.loads(document.render(_run(), "json"))
    keys = list(got)
    assert keys[keys.index("meta") + 1] == schema.MEMORY
    assert schema.MEMORY not in got["meta"] and "note" in got[schema.MEMORY]
