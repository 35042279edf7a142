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
COLLECTIVES = (PROGRAM, PROGRAM_ID, OP, COLLECTIVE, SOURCE_LINE, SOURCE_OP, MESH_AXES,
               DEVICE_BYTES, COUNT, REASON, PREDICTED_S, MEASURED_S, EXPOSED_COMM_S, WHY, FIX)
# ranked by exposed_comm_s, then measured_s, then predicted_s (the most costly first)
