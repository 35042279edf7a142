"""A run report's plots: the step timeline, the roofline and the categories, and live bytes over
the step where the run has a memory section (``harness.report.memory``), drawn once.

``plots(run)`` draws them for a fresh run (one with a chip) on first use and keeps them in
``run.plots``; a stored run's are the PNGs saved beside it (``harness.report.files``).
"""
from __future__ import annotations

from harness.record import Run
from harness.report.memory import MEMORY_PNG, timeline_pngs
from harness.report.plots import CATEGORIES_PNG, ROOFLINE_PNG, report_plots
from harness.report.step_plot import STEP_PNG, step_timeline

PLOTS = (STEP_PNG, ROOFLINE_PNG, CATEGORIES_PNG)  # in the order a report shows them
STORED = (*PLOTS, MEMORY_PNG)  # and the memory section's, which shows it in its place


def plots(run: Run) -> dict[str, bytes]:
    """The report's plots of ``run``, file name -> PNG: drawn once, on first use, for a run
    with a chip (a fresh one); read from its directory for a stored one."""
    if run.plots:
        return run.plots
    if run.chip is not None and len(run.ops):
        step = step_timeline(run.step_spans, run.step, run.predicted_spans)
        run.plots = {**({STEP_PNG: step} if step else {}),
                     **report_plots(run.ops, run.categories, run.chip), **timeline_pngs(run)}
    elif run.path is not None:
        run.plots = {name: (run.path / name).read_bytes() for name in STORED
                     if (run.path / name).is_file()}
    return run.plots
