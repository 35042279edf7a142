"""Stage 7: runs on disk and what is done with them.

``store`` saves and loads ``results/<run-id>/``, ``run`` takes a registered workload from build
to stored run, ``regress`` compares a baseline with a candidate, ``explain`` words a verdict in
the book's terms.
"""
from harness.runs.run import build_workload, run_workload, save_analysis

__all__ = ["build_workload", "run_workload", "save_analysis"]
