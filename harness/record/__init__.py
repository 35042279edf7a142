"""The record: one analysed run, in memory and on disk, under every stage.

``Tables`` holds what the analysis derives (``harness.analysis.tables.derive`` returns them);
a ``Run`` is those tables with what ran and where it is stored; ``store`` writes and finds run
directories; ``FORMAT`` is the version of the files a run is stored as. This package imports
nothing of the harness but ``schema``, ``errors`` and ``units``: every stage can name the type it
handles, and nothing here renders, plots or asks git (``harness.report`` renders a run; the
commit is taken at capture, ``harness.capture.environment``).
"""
from harness.record.run import FORMAT, Run, list_runs, runs_table
from harness.record.tables import Tables

__all__ = ["FORMAT", "Run", "Tables", "list_runs", "runs_table"]
