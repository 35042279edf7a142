"""EVENTS and OPS: the columns of a trace's op executions and of the per-op tables (measured,
predicted, compared), the per-category table, and the bounds and categories an op can have."""
from __future__ import annotations

from harness.schema.glossary import term
from predictions import roofline, rules

# --- identifiers --------------------------------------------------------------------------
PROGRAM = term("program", "the compiled program (HLO module), e.g. jit_train_step")
PROGRAM_ID = term("program_id", "the compilation's id in the trace: two compilations of one "
                  "name are two programs")
OP = term("op", "the HLO instruction as the trace names it (fusion.12)")
DEVICE = "device"            # global device id
HOST = "host"                # process index (multi-host runs)
STEP = "step"                # measured step number, 0-based
START_NS = "start_ns"        # event start, trace clock
DURATION_NS = "duration_ns"  # event duration
SHARE_NS = "share_ns"        # CPU: the execution's share of the host (harness.measure.shares)
HOST_NS = "host_ns"          # CPU: its time: the share, or its duration where less and the
#                              share is shorter than a scheduler slice (harness.measure.shares)

# --- arrivals at collectives (harness.measure.arrivals): one row per execution and device ----
EXECUTION = "execution"      # the op's k-th execution in the step on each device (0-based)
ARRIVE_NS = "arrive_ns"      # when the device's thread entered the collective (its event start)
LAST_ARRIVE_NS = "last_arrive_ns"  # the latest arrival in the device's group of the execution
END_NS = "end_ns"            # when the device's thread left it (event start + duration)
WAIT_NS = "wait_ns"          # last_arrive_ns - arrive_ns: time waiting for the group, not running
OPCODE = "opcode"
CATEGORY = term("category", "the op's kind of work: matmul, attention, collective, elementwise, "
                "reduction, copy, other")

# --- measured -----------------------------------------------------------------------------
COUNT = term("count", "executions per step, per device")
MEASURED_S = term("measured_s", "measured time per step (median over steps and devices)")
#                              (CPU: mean over devices of host shares, harness.measure.shares)
MEASURED_MIN_S = "measured_min_s"  # min over devices of the per-device median
MEASURED_MAX_S = "measured_max_s"  # max over devices of the per-device median
DEVICES = term("devices", "devices the op (or the run) ran on")
TOTAL_S = term("total_s", "device time over the whole trace, every device and execution "
               "summed (xprof's total self time)")
EXECUTIONS = term("executions", "times the program ran, per device")

# --- multi-host (harness.multihost.run) ------------------------------------------------------
HOSTS = "hosts"              # processes (hosts) the op ran on
HOST_MIN_S = "host_min_s"    # min over hosts of the host's measured_s (median over its devices)
HOST_MAX_S = "host_max_s"    # max over hosts of the same
HOST_SKEW_S = "host_skew_s"  # host_max_s - host_min_s: cross-host skew of the op
SLOWEST_HOST = "slowest_host"  # process index with host_max_s

# --- predicted ----------------------------------------------------------------------------
FLOPS = "flops"              # per device, one execution
HBM_BYTES = "hbm_bytes"
COMM_BYTES = "comm_bytes"
HOST_BYTES = "host_bytes"    # bytes over the host link (PCIe): a copy to or from host memory,
                             # S(5) (harness.hlo.spaces), priced in t_comm_s at the chip's W_pcie;
                             # a column only where some op copies to or from the host
COLLECTIVE = "collective"    # collective kind, or "" for none
GROUP_SIZE = "group_size"    # devices in each replica group
T_COMPUTE_S = "t_compute_s"
T_MEMORY_S = "t_memory_s"
T_COMM_S = "t_comm_s"
PREDICTED_S = term("predicted_s", "roofline time per step: (max of the compute, memory and "
                   "comm terms + the op overhead) x count (the book's T_lower)")
BOUND = term("bound", "the term that sets the roofline time: compute, memory, comm, overhead; "
             "unmodeled: no rule predicts the op")
WHY_UNMODELED = "why_unmodeled"  # why no rule predicts the op ("" when one does)
SOURCE_OP = term("source_op", "the JAX operation the op came from: its HLO metadata op_name "
                 "(jit(step)/dot_general); \"\" where the HLO names none")
RATE = term("rate", "what priced the op's roofline time: its matmul kernel's rate (ynn_fusion "
            "fp32), the generic peak, a memory tier, convert, collective or per-op overhead")
SOURCE_LINE = term("source_line", "file:line of the user's code the op came from (the innermost "
                   "frame outside jax and libraries, from the HLO's stack frames)")

# --- joined (measured with predicted) ----------------------------------------------------
EFFICIENCY = term("efficiency", "roofline time / measured time: 100% = at the roofline; above "
                  "it is impossible, and flagged")
GAP_S = term("gap_s", "measured - predicted: time above the roofline (ops are ranked by it)")
SHARE = term("share", "share of the step's measured op time")
WAIT_S = term("wait_s", "time per step blocked on an async transfer's -done (its exposed part)")
#          absent for other ops; efficiency > 1 there: the transfer was hidden, not faster; as a
#          summary figure, the sum over the program's -done ops

# --- per-category table (harness.analysis.gaps.by_category) ---------------------------------------
OPS_COUNT = term("ops", "ops in the category")
UNMODELED_S = term("unmodeled_s", "measured time in the category's ops no rule predicts")

# --- bounds and categories ----------------------------------------------------------------
UNMODELED = "unmodeled"
OVERHEAD = roofline.OVERHEAD      # bound of an op its fixed cost per execution dominates
CATEGORIES = rules.CATEGORIES     # an op's kind of work, in report order (predictions.rules)
(CAT_MATMUL, CAT_ATTENTION, CAT_COLLECTIVE, CAT_ELEMENTWISE, CAT_REDUCTION, CAT_COPY,
 CAT_OTHER) = CATEGORIES

# --- tables -------------------------------------------------------------------------------
EVENTS = (PROGRAM, OP, DEVICE, STEP, START_NS, DURATION_NS)
ARRIVALS = (PROGRAM, PROGRAM_ID, OP, STEP, EXECUTION, HOST, DEVICE, ARRIVE_NS, LAST_ARRIVE_NS,
            END_NS, WAIT_NS)
OPS_MEASURED = (PROGRAM, OP, COUNT, MEASURED_S, MEASURED_MIN_S, MEASURED_MAX_S, DEVICES)
# one row per program that ran: its executions, time per execution measured and predicted (the
# sums of its ops' measured_s / predicted_s, per step), efficiency, total_s and share of it
PROGRAMS = (PROGRAM, PROGRAM_ID, EXECUTIONS, MEASURED_S, PREDICTED_S, EFFICIENCY, TOTAL_S, SHARE)
OPS_HOSTS = (PROGRAM, OP, HOSTS, HOST_MIN_S, HOST_MAX_S, HOST_SKEW_S, SLOWEST_HOST)
OPS_BY_DEVICE = (PROGRAM, OP, HOST, DEVICE, COUNT, MEASURED_S)
OPS_PREDICTED = (PROGRAM, OP, OPCODE, CATEGORY, COUNT, FLOPS, HBM_BYTES, COMM_BYTES, COLLECTIVE,
                 GROUP_SIZE, T_COMPUTE_S, T_MEMORY_S, T_COMM_S, PREDICTED_S, BOUND, WHY_UNMODELED)
# (a predicted table from the HLO also has SOURCE_OP and SOURCE_LINE; one made by hand may leave
# them out)
OPS = (PROGRAM, OP, OPCODE, CATEGORY, COUNT, MEASURED_S, PREDICTED_S, EFFICIENCY, GAP_S, SHARE,
       BOUND, FLOPS, HBM_BYTES, COMM_BYTES, T_COMPUTE_S, T_MEMORY_S, T_COMM_S)
