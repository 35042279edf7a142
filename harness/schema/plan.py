"""Before running (``harness.plan``): one row per candidate layout (``harness plan``), and the
gap between the per-op sum and the book's step, per part (``harness.plan.predict.book_gap``)."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.step import PREDICTED_EXPOSED_COMM_S, PREDICTED_STEP_S
from harness.schema.summary import ANALYTIC_S, MESH, MFU_AT_ROOFLINE

# --- the gap between the per-op sum and the book's step, per part (harness.plan.predict.book_gap)
PART = "part"                      # predictions.step.PARTS, then "step"
BOOK_S = "book_s"                  # the book's seconds for the part
BOOK_WORK = "book_work"            # its work per device: FLOPs (matmul) or bytes
HLO_S = "{compile}_s"              # per-op sum of the part's ops, one column per compile
WORK_X = "{compile}_work_x"        # the HLO's work / the book's work
EXCESS_S = "{compile}_excess_s"    # HLO seconds beyond its work done at the book's rate

# --- harness plan (harness.plan): one row per candidate layout, fastest predicted first ---
LAYOUT = term("layout", "how the model is split: dp, fsdp, tp or fsdp_tp "
              "(workloads.llama.sharding)")
SPANS = term("spans", "physical torus axes the mesh's X and Y each span, M_X x M_Y (training.md)")
PEAK_BYTES = term("peak_bytes", "peak memory per chip, the compiler's memory_analysis()")
REQUIRED_BYTES = term("required_bytes", "memory per chip the TPU compiler asked for when it "
                      "refused the layout (libtpu's out-of-memory figure): what it needs, not a "
                      "peak that fits")
FITS = term("fits", "yes when the peak fits the chip's HBM; a layout that does not is ranked last")
BOOK_CONDITION = term("book_condition", "training.md's compute-bound condition with this "
                      "layout's numbers (alpha = C/W_ici)")
BOOK_BOUND = term("book_bound", "compute or comm: what the book's condition says")
PREDICTED_BOUND = term("predicted_bound", "compute or comm: whether the predicted step's "
                       "communication exceeds its compute")
AGREE = term("agree", "yes when the prediction and the book name the same bound")
PLAN_NOTE = term("note", "why a layout has no prediction, or how its split was chosen")
LEVELS = term("levels", "on several nodes or slices: the network level that binds a "
              "collective over each mesh axis, and what it crosses (docs/networks.md)")
PLAN = (LAYOUT, MESH, SPANS, PREDICTED_STEP_S, MFU_AT_ROOFLINE, PREDICTED_EXPOSED_COMM_S,
        PEAK_BYTES, REQUIRED_BYTES, FITS, BOOK_CONDITION, BOOK_BOUND, PREDICTED_BOUND, AGREE,
        ANALYTIC_S, LEVELS, PLAN_NOTE)
