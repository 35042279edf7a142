"""Every collective explained (``harness explain``; ``harness.explain``): the COLLECTIVES table."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import (
    COLLECTIVE,
    COUNT,
    MEASURED_S,
    OP,
    PREDICTED_S,
    PROGRAM,
    PROGRAM_ID,
    SOURCE_LINE,
    SOURCE_OP,
)
from harness.schema.step import EXPOSED_COMM_S

# --- every collective explained (harness explain; harness.explain) ---------------------------
MESH_AXES = term("mesh_axes", "the named mesh axes the collective runs over (its device groups "
                 "mapped onto the run's mesh); device groups where no mesh is known")
DEVICE_BYTES = term("device_bytes", "the larger of the collective's input and output on "
                        "one device: the book's V (book §4.2)")
REASON = term("reason", "why the collective exists, in the book's terms (§4.1's four matmul "
              "cases, §6.1's schemes)")
WHY = term("why", "the reason in one sentence: which dot, which operand and dimension")
FIX = term("fix", "the book's fix, one line; empty where none is needed")
# the collectives table as a run's report shows it (harness.report.collectives): the op table's
# measured_s beside the op's span on the step's timeline, each named for what it is (issue 58)
# (measured_s beside it is the op table's: the device's own time in the op, on a CPU host its
# share of the cores every device shares)
SPAN_S = term("span_s", "wall time per step of the collective on the step's timeline (an async "
              "pair: start and done), waits for peers included; median over steps and devices")
COLLECTIVES = (PROGRAM, PROGRAM_ID, OP, COLLECTIVE, SOURCE_LINE, SOURCE_OP, MESH_AXES,
               DEVICE_BYTES, COUNT, REASON, PREDICTED_S, MEASURED_S, EXPOSED_COMM_S, WHY, FIX)
# ranked by exposed_comm_s, then measured_s, then predicted_s (the most costly first)
