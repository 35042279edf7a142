"""``harness plan``: layouts of a workload ranked before running (compiled ahead of time,
priced at the roofline, set beside the book's verdict)."""
from harness.plan.layouts import LAYOUTS, Candidate, candidates, spans
from harness.plan.rank import PLANNABLE, Plan, Setting, plan, ranked

__all__ = ["LAYOUTS", "PLANNABLE", "Candidate", "Plan", "Setting", "candidates", "plan", "ranked",
           "spans"]
