"""Column names of the tables that flow between stages: the one source of truth.

Units live in the names: ``_s`` seconds, ``_ns`` raw trace times, ``_bytes`` bytes.
Every stage imports the constants from here; no other module spells a column as a string.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from harness.errors import HarnessError
from predictions import roofline, rules

# --- identifiers --------------------------------------------------------------------------
PROGRAM = "program"          # HLO module name, e.g. "jit_train_step"
PROGRAM_ID = "program_id"    # the compilation's id in the trace ("" where it gives none): two
#                              compilations of one name are two programs
OP = "op"                    # HLO instruction name as it appears in the trace ("fusion.12")
DEVICE = "device"            # global device id
HOST = "host"                # process index (multi-host runs)
STEP = "step"                # measured step number, 0-based
START_NS = "start_ns"        # event start, trace clock
DURATION_NS = "duration_ns"  # event duration
SHARE_NS = "share_ns"        # CPU: the execution's share of the host (harness.shares)
OPCODE = "opcode"
CATEGORY = "category"

# --- measured -----------------------------------------------------------------------------
COUNT = "count"              # executions per step (per device)
MEASURED_S = "measured_s"    # median over steps of the time per step, median over devices (CPU:
                             # mean over devices of host shares, harness.shares)
MEASURED_MIN_S = "measured_min_s"  # min over devices of the per-device median
MEASURED_MAX_S = "measured_max_s"  # max over devices of the per-device median
DEVICES = "devices"          # number of devices the op ran on
TOTAL_S = "total_s"          # the op's device time over the whole trace, every device and
#                              execution summed (xprof's hlo_stats "total self time")
EXECUTIONS = "executions"    # times a program ran (per device, median over devices)

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
PREDICTED_S = "predicted_s"  # (max of the terms + the chip's op overhead) x count (T_lower)
BOUND = "bound"              # one of BOUNDS
WHY_UNMODELED = "why_unmodeled"  # why no rule predicts the op ("" when one does)

# --- compared -----------------------------------------------------------------------------
EFFICIENCY = "efficiency"    # predicted_s / measured_s, 1.0 = at the roofline
GAP_S = "gap_s"              # measured_s - predicted_s
SHARE = "share"              # measured_s / measured step time
WAIT_S = "wait_s"            # measured_s of an async pair's -done: time per step blocked until
                             # the pair's transfer lands (its exposed part), absent for other ops;
                             # efficiency > 1 there: the transfer was hidden, not faster;
                             # as a summary figure, the sum over the program's -done ops

# --- baseline vs candidate (harness compare; harness.runs.regress) -------------------------
FIGURE = "figure"                  # a step figure's name (harness.runs.changes.STEP_FIGURES)
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
VERDICT = "verdict"                # one of harness.runs.regress.VERDICTS

# --- sweep summary (harness sweep): one row per point --------------------------------------
POINT = "point"                    # 1-based position in the expanded sweep
KEY = "key"                        # stable hash of the point (harness.sweep.plan.Point.key)
WORKLOAD = "workload"
PRESET = "preset"
MESH = "mesh"                      # mesh shape, "4x2"
CHIP = "chip"                      # chip the run was predicted for
CHIP_SOURCE = "chip_source"        # where the chip came from: flag, trace (device planes), device
OVERRIDES = "overrides"            # the point's config overrides, "kind=all_gather nbytes=4096"
STATUS = "status"                  # see harness.sweep.run.STATUSES
ERROR = "error"                    # one line, for failed points
STEPS = "steps"                    # measured steps per point
WARMUP = "warmup"                  # untraced warm-up steps per point
RUN = "run"                        # run directory, relative to the sweep directory
STEP_S = "step_s"                  # the measured step from the timeline: the slowest device's
#                                    median step, its first op's start to its last op's end
#                                    (harness.step.timeline.measured_step)
WALL_STEP_S = "wall_step_s"        # median wall time of the untraced steps capture ran right
#                                    after the traced ones (dispatch to outputs ready; tracing's
#                                    cost left out); absent for a trace captured elsewhere
TRACE_OVERHEAD = "trace_overhead"  # median traced step / median untraced step (capture's timing)
GRAPH_STEP_S = "graph_step_s"      # GPU: the same for the user's own compile (CUDA graphs)
COVERAGE = "coverage"              # share of measured time in ops a rule predicts
MFU = "mfu"                        # model FLOPs utilisation (matmul parameters, MaxText's)
MFU_BOOK = "mfu_book_6p"           # MFU with the book's 6P over all parameters (planning)
MFU_FORMULA = "model_flops_formula"  # how the MFU numerator (model_flops) is counted
ANALYTIC_S = "analytic_s"          # the book's workload-level step time on the chip
SERIES = "series"                  # curve a point belongs to in the sweep plots
COLLECTIVE_S = "collective_s"      # measured time per step in collective ops
MESSAGE_BYTES = "message_bytes"    # collective input bytes per device (the workload's nbytes)
BUS_BYTES = "bus_bytes"            # bytes each device moves over links (nccl-tests' busbw bytes)
MEASURED_BUS_GBPS = "measured_bus_GBps"    # bus_bytes / collective_s, in 1e9 bytes/s
PREDICTED_BUS_GBPS = "predicted_bus_GBps"  # bus_bytes / analytic_s, in 1e9 bytes/s
MODEL_FLOPS = "model_flops"        # the step's useful FLOPs over all devices (matmul: 2BDF)
MATMUL_EFFICIENCY = "matmul_efficiency"    # predicted / measured time of the matmul-category ops
HOST_SPEED = "host_speed"           # CPU: the run's drift factor (harness.calibrate.drift), its
                                   # host's speed over the calibration's; chip rates scaled by it

# --- per-category table (harness.compare.by_category) ---------------------------------------
OPS_COUNT = "ops"                  # ops in the category
UNMODELED_S = "unmodeled_s"        # measured time of the category's ops no rule predicts

# --- run summary (meta.json "summary"): one figure each, defined in harness.compare ---------
# STEP_S, WALL_STEP_S, COVERAGE, EFFICIENCY, MFU, MODEL_FLOPS, ANALYTIC_S and DEVICES above are
# summary keys too.
MEASURED_OPS_S = "measured_ops_s"  # sum of measured_s over the step's ops
PREDICTED_OPS_S = "predicted_ops_s"  # sum of predicted_s over the modeled ops
HLO_FLOPS_PER_DEVICE = "hlo_flops_per_device"  # the HLO's FLOPs per device per step
HFU = "hfu"                        # hardware FLOPs utilisation: hlo_flops / (step_s * peak)
ANALYTIC_FORMULA = "analytic_formula"  # the book formula behind analytic_s
FLOPS_VS_COST_ANALYSIS = "flops_vs_cost_analysis"  # our HLO FLOPs vs XLA's, relative difference
FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE = "flops_vs_cost_analysis_loops_once"  # same, loops once
# ahead-of-time predictions (harness predict-hlo; harness.hlo.chips): no measured step
PREDICTED_STEP_S = "predicted_step_s"  # sum of the ops' roofline times (no overlap)
MFU_AT_ROOFLINE = "mfu_at_roofline"    # MFU if the step ran at predicted_step_s
FIGURES = (STEP_S, WALL_STEP_S, GRAPH_STEP_S, TRACE_OVERHEAD, MEASURED_OPS_S, PREDICTED_OPS_S,
           COVERAGE, EFFICIENCY, HLO_FLOPS_PER_DEVICE, HFU, DEVICES, MODEL_FLOPS, MFU, MFU_BOOK,
           MFU_FORMULA,
           ANALYTIC_S, ANALYTIC_FORMULA, FLOPS_VS_COST_ANALYSIS,
           FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE, PREDICTED_STEP_S, MFU_AT_ROOFLINE, WAIT_S)
# shown as percentages
FRACTIONS = (EFFICIENCY, SHARE, COVERAGE, MFU, MFU_BOOK, HFU, MFU_AT_ROOFLINE)

# --- run metadata (meta.json; harness.capture.environment writes the machine's) --------------
# The formats a run's report renders to (harness.report.document.FORMATS implements each).
REPORT_FORMATS = ("csv", "html", "json", "md", "text")

TITLE = "title"
SUMMARY = "summary"                # the figures above
NOTES = "notes"                    # report notes, one line each
CROSS_CHECK = "cross_check"        # harness.hlo.cross_check against cost_analysis()
GIT_SHA = "git_sha"                # the commit of the code that ran (the working directory's
#                                    checkout; else the harness's own)
GIT_DIRTY = "git_dirty"            # True: that checkout had uncommitted changes to tracked files
HLO_FINGERPRINTS = "hlo_fingerprints"  # program -> hash of its optimized HLO, metadata left out
#                                        (harness.capture.fingerprint): same hash, same program
XLA_FLAGS = "xla_flags"            # the XLA_FLAGS the run was started with
CONFIG = "config"                  # the workload config, field -> value
CALIBRATION = "calibration"        # the host calibration behind a cpu chip
DEVICE_KIND = "device_kind"
DEVICE_COUNT = "device_count"
TIME = "time"
COMPILER_OPTIONS = "compiler_options"  # options the traced executable was compiled with
GRAPH_NOTE = "graph_note"          # GPU: why graph_step_s and step_s differ, when they do
STEP_TIMES_S = "step_times_s"      # untraced steps' wall times, right after the trace (capture)
STEP_CPU_TIMES_S = "step_cpu_times_s"  # the same steps' process CPU time, every thread's
TRACED_STEP_TIMES_S = "traced_step_times_s"  # the traced steps' wall times
TRACE_STOP_S = "trace_stop_s"      # seconds jax.profiler.stop_trace took
MEMORY_NEEDED_BYTES = "memory_needed_bytes"  # per device, XLA's memory_analysis (harness.memory)
MEMORY_CAPACITY_BYTES = "memory_capacity_bytes"  # what one device holds (CPU: its share of RAM)
TEST = "test"                      # the pytest test of a harness_run fixture's run: its file's
#                                    path from where pytest started, ::name[params]
VERSIONS = ("jax_version", "jaxlib_version", "libtpu_version")  # environment(): what compiled it
TRACE_FILE = "trace"               # the xplane.pb a trace analysis read (harness trace)
OP_TIMING = "op_timing"            # what measured_s is: harness.shares.HOST_SHARE or DEVICE_MEDIAN
# WORKLOAD, PRESET, MESH, CHIP and PROGRAM above are meta keys too.

# --- the gap between the per-op sum and the book's step, per part (harness.hlo.chips.book_gap)
PART = "part"                      # predictions.step.PARTS, then "step"
BOOK_S = "book_s"                  # the book's seconds for the part
BOOK_WORK = "book_work"            # its work per device: FLOPs (matmul) or bytes
HLO_S = "{compile}_s"              # per-op sum of the part's ops, one column per compile
WORK_X = "{compile}_work_x"        # the HLO's work / the book's work
EXCESS_S = "{compile}_excess_s"    # HLO seconds beyond its work done at the book's rate

UNMODELED = "unmodeled"
OVERHEAD = roofline.OVERHEAD      # bound of an op its fixed cost per execution dominates
BOUNDS = ("compute", "memory", "comm", OVERHEAD, UNMODELED)
CATEGORIES = rules.CATEGORIES     # an op's kind of work, in report order (predictions.rules)
(CAT_MATMUL, CAT_ATTENTION, CAT_COLLECTIVE, CAT_ELEMENTWISE, CAT_REDUCTION, CAT_COPY,
 CAT_OTHER) = CATEGORIES

# --- the step as the timeline shows it (harness.step.timeline), per (step, device) ---------
TIMELINE_STEP_S = "timeline_step_s"  # a device's step: its first op's start to its last op's end
COMPUTE_S = "compute_s"              # union of the compute ops' intervals in the step
COMM_S = "comm_s"                    # union of the communication ops' intervals
OVERLAPPED_COMM_S = "overlapped_comm_s"  # communication while some compute op ran
EXPOSED_COMM_S = "exposed_comm_s"    # communication while no compute op ran
IDLE_S = "idle_s"                    # union of the gaps with nothing running
IDLE_DEVICE = "idle"                 # a device of the run with no op in the trace (listed, not
#                                      averaged in)
# The step object (meta.json and JSON "step"; harness.step): the measured step (STEP_S and the
# terms above, of the slowest device's median step; DEVICE and STEP say which; STEPS how many;
# DEVICES each device's), each communication op's share (STEP_COLLECTIVES), and the book beside
# it (chapter 1: a step takes max(T_math, T_comms) with perfect overlap, their sum with none).
STEP_OBJECT = "step"
STEP_COLLECTIVES = "collectives"     # per communication op: comm_s and exposed_comm_s per step
T_MATH_S = "t_math_s"                # the step's compute at the roofline (book: T_math)
T_COMMS_S = "t_comms_s"              # its communication at the roofline (book: T_comms)
BOUNDS_FROM = "bounds_from"          # where T_math/T_comms come from: "book" (the workload's
#                                      estimate) or "hlo" (the compiled ops' roofline times)
OVERLAP_BOUND_S = "overlap_bound_s"  # max(T_math, T_comms): the step with perfect overlap
SERIAL_BOUND_S = "serial_bound_s"    # T_math + T_comms: the step with no overlap
REGIME = "regime"                    # "compute-bound" (T_math >= T_comms) or "communication-bound"
# The predicted step (harness.step.simulate): PREDICTED_STEP_S, the schedule played with every
# op at its roofline time, and REPLAY_STEP_S, the same schedule with every op at its measured
# duration (a check of the schedule model: it should land on the measured STEP_S).
REPLAY_STEP_S = "replay_step_s"
# One step's op intervals, for the step timeline picture (harness.step.timeline.spans; the
# simulated step's from harness.step.simulate): seconds from the step's start, per lane.
LANE = "lane"                        # LANE_COMPUTE or LANE_COMM
LANE_COMPUTE, LANE_COMM = "compute", "comm"
START_S = "start_s"                  # seconds from the step's first op
END_S = "end_s"
STEP_SPANS = (OP, LANE, START_S, END_S)

# --- tables -------------------------------------------------------------------------------
EVENTS = (PROGRAM, OP, DEVICE, STEP, START_NS, DURATION_NS)
OPS_MEASURED = (PROGRAM, OP, COUNT, MEASURED_S, MEASURED_MIN_S, MEASURED_MAX_S, DEVICES)
# one row per program that ran: its executions, time per execution measured and predicted (the
# sums of its ops' measured_s / predicted_s, per step), efficiency, total_s and share of it
PROGRAMS = (PROGRAM, PROGRAM_ID, EXECUTIONS, MEASURED_S, PREDICTED_S, EFFICIENCY, TOTAL_S, SHARE)
OPS_HOSTS = (PROGRAM, OP, HOSTS, HOST_MIN_S, HOST_MAX_S, HOST_SKEW_S, SLOWEST_HOST)
OPS_BY_DEVICE = (PROGRAM, OP, HOST, DEVICE, COUNT, MEASURED_S)
OPS_PREDICTED = (PROGRAM, OP, OPCODE, CATEGORY, COUNT, FLOPS, HBM_BYTES, COMM_BYTES, COLLECTIVE,
                 GROUP_SIZE, T_COMPUTE_S, T_MEMORY_S, T_COMM_S, PREDICTED_S, BOUND, WHY_UNMODELED)
OPS = (PROGRAM, OP, OPCODE, CATEGORY, COUNT, MEASURED_S, PREDICTED_S, EFFICIENCY, GAP_S, SHARE,
       BOUND, FLOPS, HBM_BYTES, COMM_BYTES, T_COMPUTE_S, T_MEMORY_S, T_COMM_S)

STEP_TIMES = (STEP, DEVICE, TIMELINE_STEP_S, COMPUTE_S, COMM_S, OVERLAPPED_COMM_S, EXPOSED_COMM_S,
              IDLE_S)
STEP_CHANGES = (FIGURE, BASELINE_S, CANDIDATE_S, DELTA_S, CHANGE)
OP_CHANGES = (PROGRAM, OP, CATEGORY, BOUND, COLLECTIVE, GROUP_SIZE, BASELINE_S, CANDIDATE_S,
              DELTA_S, CHANGE, BASELINE_PREDICTED_S, CANDIDATE_PREDICTED_S, PREDICTED_CHANGE,
              WORK_CHANGE, BASELINE_EFFICIENCY, CANDIDATE_EFFICIENCY)
SWEEP_SUMMARY = (POINT, WORKLOAD, PRESET, MESH, CHIP, OVERRIDES, STATUS, STEP_S, EXPOSED_COMM_S,
                 IDLE_S, PREDICTED_STEP_S, WALL_STEP_S, COVERAGE, EFFICIENCY, MFU, ANALYTIC_S,
                 COLLECTIVE, GROUP_SIZE, MESSAGE_BYTES, COLLECTIVE_S, BUS_BYTES, MEASURED_BUS_GBPS,
                 PREDICTED_BUS_GBPS, MODEL_FLOPS, MATMUL_EFFICIENCY, HOST_SPEED, SERIES, ERROR,
                 RUN, KEY)


class SchemaError(HarnessError):
    """A table handed to a stage lacks columns that stage needs."""


def validate(df: pd.DataFrame, columns: Sequence[str], *, where: str = "table") -> pd.DataFrame:
    """``df`` unchanged if it has every column in ``columns``; SchemaError otherwise."""
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaError(f"{where}: missing columns {missing}; has {list(df.columns)}")
    return df


def empty(columns: Sequence[str]) -> pd.DataFrame:
    """An empty frame with the given columns."""
    return pd.DataFrame({c: [] for c in columns})
