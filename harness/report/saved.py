"""The report stored beside a run's data: report.md, report.html and the PNG plots.

``Run.save`` writes the data (``harness.record``); every place that saves a run for a user (the
``run`` and ``profile`` commands, sweep points, the multi-host launcher, the pytest plugin)
passes it ``files(run)``, so that a stored run reads as it always has and a sweep's page links
each point's report.html.
"""
from __future__ import annotations

from harness.record import Run
from harness.report.document import render
from harness.report.drawn import plots as drawn_plots

REPORT_FILES = {"report.md": "md", "report.html": "html"}  # rendered beside the tables


def files(run: Run, plots: bool = True) -> dict[str, str | bytes]:
    """The report files of ``run``, file name -> text or PNG: Markdown and HTML and, with
    ``plots`` (False: a sweep point's, none drawn), the plots they show."""
    out: dict[str, str | bytes] = {name: render(run, fmt, plots=plots)
                                   for name, fmt in REPORT_FILES.items()}
    out.update(drawn_plots(run) if plots else {})
    return out
