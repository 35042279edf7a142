"""The step as a whole (issue "The step"): where a step's time went and where it should go.

``timeline``: the measured step, decomposed per (step, device) from the trace's intervals
(compute, communication, overlapped and exposed communication, idle).
``bounds``: the book beside it (T_math, T_comms, the overlap and serial bounds, the regime).
``figures``: the run's step object from those parts.
``waits``: why the devices wait: each step's period and the waiting in it split by cause
(dispatch, python, input, peers, a core, host callbacks, unexplained; ``between``: the host's
time between executions by what the trace shows); ``stragglers``: the devices or processes the
others wait for at collectives; ``verdict``: the step object's waits and their one line of
verdict and fix. ``bubble``: a pipelined run's bubble, counted from the schedule it ran and
priced on its stage loop.
``replay``: measured durations for the replay.
``simulate``: the predicted step, the compiled program's schedule played out in XLA's order
with every op at its roofline time (``roofline``) or at its measured duration (``replay``);
``play``: the timed schedule it plays and the player's state.
"""
from harness.step.figures import comm_ops, containers, simulated, step_figures
from harness.step.simulate import Simulated, critical_ops, simulate
from harness.step.timeline import decompose, exposed_by_op, measure, merged
from harness.step.transfers import roofline_durations

__all__ = ["Simulated", "comm_ops", "containers", "critical_ops", "decompose", "exposed_by_op",
           "measure", "merged", "roofline_durations", "simulate", "simulated", "step_figures"]
