"""Baseline vs candidate (``harness compare``): what changed between two runs, step and ops
(``harness.regress.judge``), and two layouts side by side (``harness.regress.side_by_side``)."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import BOUND, CATEGORY, COLLECTIVE, GROUP_SIZE, OP, PROGRAM

# --- baseline vs candidate (harness compare; harness.regress.judge) -------------------------
FIGURE = "figure"                  # a step figure's name (harness.regress.changes.STEP_FIGURES)
BASELINE_S = "baseline_s"          # the baseline's time (an op's measured_s, or a step figure)
CANDIDATE_S = "candidate_s"        # the candidate's
DELTA_S = "delta_s"                # candidate_s - baseline_s
CHANGE = "change"                  # candidate_s / baseline_s - 1 (+1.0 = 2x slower)
BASELINE_PREDICTED_S = "baseline_predicted_s"    # the op's roofline time in the baseline
CANDIDATE_PREDICTED_S = "candidate_predicted_s"  # ... and in the candidate
PREDICTED_CHANGE = "predicted_change"  # candidate_predicted_s / baseline_predicted_s - 1
WORK_CHANGE = "work_change"        # an op's FLOPs, HBM or comm bytes, candidate / baseline - 1
#                                    (of the three, the one that moved most)
BASELINE_EFFICIENCY = "baseline_efficiency"
CANDIDATE_EFFICIENCY = "candidate_efficiency"
P_VALUE = "p_value"                # one-sided p of the wall step's slowdown against its noise
VERDICT = "verdict"                # one of harness.regress.judge.VERDICTS

# --- two layouts side by side (harness compare; harness.regress.side_by_side) -------------------
MATCHED_BY = "matched_by"          # how the two runs' ops were paired: "name" or "source op"
SIDE = term("side", "where the op or collective ran: in both layouts, only in A (the baseline) "
            "or only in B (the candidate)")
AXES = term("axes", "the mesh axes a collective's groups span (Y, X+Y), where the group size "
            "tells")
OPS_MATCHED = term("matched_ops", "the run's ops with this source op and category, summed "
                   "(0: none); with suffix _a for A, _b for B (harness.regress.changes.join)")
CONTRIBUTION_S = "contribution_s"  # seconds a part adds to the slower layout's step (over the
#                                    faster's; harness.regress.side_by_side.attribute)

# --- tables -------------------------------------------------------------------------------
STEP_CHANGES = (FIGURE, BASELINE_S, CANDIDATE_S, DELTA_S, CHANGE)
OP_CHANGES = (PROGRAM, OP, CATEGORY, BOUND, COLLECTIVE, GROUP_SIZE, BASELINE_S, CANDIDATE_S,
              DELTA_S, CHANGE, BASELINE_PREDICTED_S, CANDIDATE_PREDICTED_S, PREDICTED_CHANGE,
              WORK_CHANGE, BASELINE_EFFICIENCY, CANDIDATE_EFFICIENCY)

# --- each point's history over nights (harness history; harness.regress.trend) ----------------
NIGHT = term("night", "the night's directory under the root of nights (a sweep's, a pytest "
             "--harness-save directory)")
COMMITS = term("commits", "a change point's commit range A..B: the last night's before it, the "
               "first's after it (git log A..B lists those between)")
CAUSE = term("cause", "program: the compiled program changed; same program: it ran slower; "
             "host: the same code on both nights; noise: within it; spread: too noisy to judge")
NIGHTS = term("nights", "the nights the point has a run in")
CPU_STEP_S = "cpu_step_s"          # a night's median CPU time per step (harness.regress.history)
SPREAD = "spread"                  # SD of the log median step of a night's runs (two or more)
