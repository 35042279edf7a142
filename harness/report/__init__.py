"""Stage 6: a run's report rendered as text, Markdown, HTML, CSV or JSON, with its plots.

``document`` holds the report and its renderers, ``tables`` the unit-aware table formatting
every view shares, ``plots`` the roofline and per-category figures.
"""
from harness.report.document import (
                                     CATEGORIES_PNG,
                                     FORMATS,
                                     ROOFLINE_PNG,
                                     Report,
                                     render,
                                     to_text,
)

__all__ = ["CATEGORIES_PNG", "FORMATS", "ROOFLINE_PNG", "Report", "render", "to_text"]
