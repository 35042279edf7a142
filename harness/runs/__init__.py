"""Stage 7: runs on disk and what is done with them.

``store`` saves and loads ``results/<run-id>/`` (``save_report`` / ``load``: the run comes back
with its ``report``), ``run`` takes a registered workload from build to stored run, ``regress``
compares a baseline with a candidate, ``explain`` words a verdict in the book's terms.
"""
from harness.runs.run import build_workload, run_workload, save_analysis
from harness.runs.store import StoredRun
from harness.runs.store import load as load_run

__all__ = ["StoredRun", "build_workload", "load_run", "run_workload", "save_analysis"]
