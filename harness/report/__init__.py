"""Stage 6: a run's report rendered as text, Markdown, HTML, CSV or JSON, with its plots.

``document`` holds the renderers of a ``harness.runs.run.Run``, ``tables`` the unit-aware table
formatting every view shares, ``plots`` the roofline and per-category figures.
"""
from harness.report.document import FORMATS, render, to_text

__all__ = ["FORMATS", "render", "to_text"]
