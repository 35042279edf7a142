"""The step as a whole (issue "The step"): where a step's time went and where it should go.

``timeline``: the measured step, decomposed per (step, device) from the trace's intervals
(compute, communication, overlapped and exposed communication, idle).
``simulate``: the predicted step, the compiled program's schedule played out in XLA's order
with every op at its roofline time (``roofline``) or at its measured duration (``replay``).
"""
from harness.step.timeline import decompose, exposed_by_op, merged

__all__ = ["decompose", "exposed_by_op", "merged"]
