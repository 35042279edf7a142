"""A run's report rendered as text, Markdown, HTML, CSV or JSON, with its plots.

``render(run, fmt)`` gives a ``harness.record.Run``'s report (``document``);
``drawn.plots(run)`` its plots, drawn once; ``files(run)`` the report stored beside a run's data
(``saved``). ``tables`` holds the unit-aware table formatting every view shares, ``plots`` draws
the roofline and per-category plots.
"""
from harness.report.document import FORMATS, render, to_text
from harness.report.saved import files

__all__ = ["FORMATS", "files", "render", "to_text"]
