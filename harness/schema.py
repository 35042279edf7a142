"""Column names of the tables that flow between stages: the one source of truth.

Units live in the names: ``_s`` seconds, ``_ns`` raw trace times, ``_bytes`` bytes, ``_GBps``
1e9 bytes/s; ``FRACTIONS`` are shown as percentages, ``RATIOS`` as multiples.
Every stage imports the constants from here; no other module spells a column as a string.
A name a report shows is made with ``term``, which enters its one-line meaning for readers in
``GLOSSARY``: the reports' legends under each table and their HTML hover text.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.errors import HarnessError
from predictions import roofline, rules

if TYPE_CHECKING:  # pandas is imported where a table is made: harness trace starts without it
    import pandas as pd

GLOSSARY: dict[str, str] = {}  # name -> its meaning for a reader, one line (``term``)


def term(name: str, meaning: str) -> str:
    """``name``, entered in ``GLOSSARY`` with ``meaning`` (what a report's reader needs)."""
    GLOSSARY[name] = meaning
    return name


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
SOURCE_LINE = term("source_line", "file:line of the user's code the op came from (the innermost "
                   "frame outside jax and libraries, from the HLO's stack frames)")

# --- compared -----------------------------------------------------------------------------
EFFICIENCY = term("efficiency", "roofline time / measured time: 100% = at the roofline; above "
                  "it is impossible, and flagged")
GAP_S = term("gap_s", "measured - predicted: time above the roofline (ops are ranked by it)")
SHARE = term("share", "share of the step's measured op time")
WAIT_S = term("wait_s", "time per step blocked on an async transfer's -done (its exposed part)")
#          absent for other ops; efficiency > 1 there: the transfer was hidden, not faster; as a
#          summary figure, the sum over the program's -done ops

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

# --- sweep summary (harness sweep): one row per point --------------------------------------
POINT = term("point", "the point's place in the sweep (links to its own page)")
KEY = "key"                        # stable hash of the point (harness.sweep.grid.Point.key)
WORKLOAD = term("workload", "the registered workload that ran")
PRESET = "preset"
MESH = term("mesh", "device mesh shape, 4x2 = 4 devices along X by 2 along Y")
CHIP = term("chip", "the chip the run was predicted for")
CHIP_SOURCE = "chip_source"        # where the chip came from: flag, trace (device planes), device
OVERRIDES = term("overrides", "the point's settings over the workload's preset")
STATUS = term("status", "done, failed, oom (out of memory) or pending")
ERROR = "error"                    # one line, for failed points
STEPS = "steps"                    # measured steps per point
WARMUP = "warmup"                  # untraced warm-up steps per point
RUN = "run"                        # run directory, relative to the sweep directory
STEP_S = term("step_s", "the measured step: first op's start to last op's end on the slowest "
              "device, its median step")  # harness.step.timeline.measured_step
WALL_STEP_S = term("wall_step_s", "wall time of an untraced step, dispatch to outputs ready "
                   "(median; absent for a trace captured elsewhere)")
TRACE_OVERHEAD = term("trace_overhead", "traced step / untraced step, wall time (1.0x: tracing "
                      "cost nothing)")
GRAPH_STEP_S = term("graph_step_s", "GPU: the untraced step of the user's own compile (CUDA "
                    "graphs on)")
COVERAGE = term("coverage", "share of measured op time in ops a rule predicts")
MFU = term("mfu", "model FLOPs utilisation: the model's FLOPs / (step x devices x peak FLOP/s); "
           "absent where the workload does no model FLOPs")  # matmul parameters, MaxText's
MFU_BOOK = term("mfu_book_6p", "MFU counting the book's 6P FLOPs over all parameters")
MFU_FORMULA = term("model_flops_formula", "how model_flops is counted")
ANALYTIC_S = term("analytic_s", "the book's step time for the workload on the chip (its formula: "
                  "analytic_formula)")
SERIES = "series"                  # curve a point belongs to in the sweep plots
COLLECTIVE_S = term("collective_s", "measured time per step in collective ops")
MESSAGE_BYTES = term("message_bytes", "the collective's input bytes per device")
BUS_BYTES = term("bus_bytes", "bytes each device moves over links (nccl-tests' bus bytes)")
MEASURED_BUS_GBPS = term("measured_bus_GBps", "bus bandwidth: bus_bytes / measured collective "
                         "time (nccl-tests' busbw)")
PREDICTED_BUS_GBPS = term("predicted_bus_GBps", "the book's bus bandwidth: bus_bytes / "
                          "analytic_s")
MODEL_FLOPS = term("model_flops", "the step's useful FLOPs over all devices (matmul: 2BDF)")
MATMUL_EFFICIENCY = term("matmul_efficiency", "efficiency of the matmul ops alone")
HOST_SPEED = term("host_speed", "CPU: the host's speed around the run over its calibrated speed, "
                  "which the chip's rates are scaled by; '-': it moved over 1.5x during the run, "
                  "so no one figure holds")  # harness.chip.drift

# --- per-category table (harness.analysis.gaps.by_category) ---------------------------------------
OPS_COUNT = term("ops", "ops in the category")
UNMODELED_S = term("unmodeled_s", "measured time in the category's ops no rule predicts")

# --- run summary (meta.json "summary"): one figure each, defined in harness.analysis.gaps ---------
# STEP_S, WALL_STEP_S, COVERAGE, EFFICIENCY, MFU, MODEL_FLOPS, ANALYTIC_S and DEVICES above are
# summary keys too.
MEASURED_OPS_S = term("measured_ops_s", "the step's ops' measured times, summed")
PREDICTED_OPS_S = term("predicted_ops_s", "the modeled ops' roofline times, summed (no overlap)")
HLO_FLOPS_PER_DEVICE = term("hlo_flops_per_device", "the compiled program's FLOPs per device "
                            "per step")
HFU = term("hfu", "hardware FLOPs utilisation: the compiled program's FLOPs / (step x peak "
           "FLOP/s)")
ANALYTIC_FORMULA = term("analytic_formula", "the book's formula behind analytic_s")
FLOPS_VS_COST_ANALYSIS = "flops_vs_cost_analysis"  # our HLO FLOPs vs XLA's, relative difference
FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE = "flops_vs_cost_analysis_loops_once"  # same, loops once
# ahead-of-time predictions (harness predict-hlo; harness.plan.predict) and a run's step object:
# the schedule simulated (harness.step.simulate), one execution of it played out
PREDICTED_STEP_S = term("predicted_step_s", "the step predicted at the roofline: XLA's schedule "
                        "played with every op at its roofline time")
PREDICTED_COMM_S = term("predicted_comm_s", "communication in the predicted step (transfers and "
                        "collectives)")
PREDICTED_EXPOSED_COMM_S = term("predicted_exposed_comm_s", "the predicted step's communication "
                                "that no compute hides")
SIMULATED_FROM = "simulated_from"        # what the order was: "schedule" (is_scheduled=true) or
#                                          "topological order" (an unscheduled module)
CRITICAL_COMPUTE_S = term("critical_compute_s", "compute time on the predicted step's critical "
                          "path")
CRITICAL_COMM_S = term("critical_comm_s", "communication time on it (the two add to the "
                       "predicted step)")
CRITICAL_S = term("critical_s", "seconds an op added to the critical path")
CRITICAL_PATH = "critical_path"          # the ops that added most to it: op, kind, critical_s,
#                                          count (executions that added any)
LANE = "lane"                            # where a span ran: "device" (measured), "core" or a
#                                          link ("ici", "ici 2", "dma", "h2d", "d2h")
KIND = "kind"                            # a span's work: "compute" or "comm"
START_S = "start_s"                      # a span's start, seconds from the step's start
END_S = "end_s"                          # its end
MFU_AT_ROOFLINE = term("mfu_at_roofline", "MFU if the step ran at predicted_step_s")
FIGURES = (STEP_S, WALL_STEP_S, GRAPH_STEP_S, TRACE_OVERHEAD, MEASURED_OPS_S, PREDICTED_OPS_S,
           COVERAGE, EFFICIENCY, HLO_FLOPS_PER_DEVICE, HFU, DEVICES, MODEL_FLOPS, MFU, MFU_BOOK,
           MFU_FORMULA,
           ANALYTIC_S, ANALYTIC_FORMULA, FLOPS_VS_COST_ANALYSIS,
           FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE, PREDICTED_STEP_S, MFU_AT_ROOFLINE, WAIT_S,
           BUS_BYTES, MEASURED_BUS_GBPS, PREDICTED_BUS_GBPS)
# shown as percentages
FRACTIONS = (EFFICIENCY, SHARE, COVERAGE, MFU, MFU_BOOK, HFU, MFU_AT_ROOFLINE, MATMUL_EFFICIENCY,
             HOST_SPEED)
# repeated work (harness.explain.redundant)
REPEAT = term("repeat", "how many devices compute the same thing: the product of the axes the "
              "op's work is not split over (1.0x: no repeated work)")
REPLICATED_AXES = term("replicated_axes", "the mesh axes over which the op repeats its work "
                       "(its operands are not split over them)")
REDUNDANT_WORK = term("redundant_work", "the program's FLOPs (per device x devices) over the "
                      "model's FLOPs: above 1.0x the layout repeats work")
# shown as multiples ("1.05x")
RATIOS = (TRACE_OVERHEAD, REPEAT, REDUNDANT_WORK)
# fractions of a roofline or a peak: above 100% is impossible (harness.analysis.gaps.beats_roofline)
ROOFLINE_FRACTIONS = (EFFICIENCY, MATMUL_EFFICIENCY, MFU, MFU_BOOK, HFU)

# --- run metadata (meta.json; harness.capture.environment writes the machine's) ----------------
# The formats a run's report renders to (harness.report.document.FORMATS implements each).
REPORT_FORMATS = ("csv", "html", "json", "md", "text")

TITLE = "title"
SUMMARY = "summary"                # the figures above
NOTES = "notes"                    # report notes, one line each
CROSS_CHECK = "cross_check"        # harness.hlo.cross_check against cost_analysis()
GIT_SHA = "git_sha"                # the commit of the code that ran (a profiled script's
#                                    checkout; else the working directory's; else the harness's)
GIT_DIRTY = "git_dirty"            # True: that checkout had uncommitted changes to tracked files
HLO_FINGERPRINTS = "hlo_fingerprints"  # program -> hash of its optimized HLO, metadata left out
#                                        (harness.capture.environment.fingerprint): same program
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
MEMORY_NEEDED_BYTES = "memory_needed_bytes"  # per device, XLA's memory_analysis (capture.memory)
MEMORY_CAPACITY_BYTES = "memory_capacity_bytes"  # what one device holds (CPU: its share of RAM)
TEST = "test"                      # the pytest test of a harness_run fixture's run: its file's
#                                    path from where pytest started, ::name[params]
VERSIONS = ("jax_version", "jaxlib_version", "libtpu_version")  # environment(): what compiled it
TRACE_FILE = "trace"               # the xplane.pb a trace analysis read (harness trace)
OP_TIMING = "op_timing"            # what measured_s is: measure.shares.HOST_SHARE or DEVICE_MEDIAN
HARNESS_VERSION = "harness_version"  # the scaling-harness that measured it (environment())
MESHES = "meshes"                  # every mesh a profiled script built (harness.capture.meshes):
#                                    [{"axes": {name: size}, "devices": [device ids, mesh order]}]
SEGMENTS = "segments"              # a profiled script's trace segments, each one's recording
#                                    window as its trace says: [[start, stop]] in unix seconds
SCRIPT = "script"                  # a profiled script: {"path", "args", "outcome"}
# WORKLOAD, PRESET, MESH, CHIP and PROGRAM above are meta keys too.

# --- the gap between the per-op sum and the book's step, per part (harness.plan.predict.book_gap)
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
COMPUTE_S = term("compute_s", "time in the step with some compute op running")
COMM_S = term("comm_s", "time in the step with some communication op running")
OVERLAPPED_COMM_S = term("overlapped_comm_s", "communication hidden under compute")
EXPOSED_COMM_S = term("exposed_comm_s", "communication with no compute under it: the step waits "
                      "for it")
IDLE_S = term("idle_s", "time in the step with no op running")
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
# One step's op intervals, for the step timeline picture: the measured step's
# (harness.step.timeline.spans, every op on the device's lane) and the simulated step's
# (harness.step.simulate, on the core or a link); LANE, KIND, START_S and END_S above.
LANE_DEVICE = "device"
KIND_COMPUTE, KIND_COMM = "compute", "comm"
STEP_SPANS = (OP, LANE, KIND, START_S, END_S)

# --- every collective explained (harness explain; harness.explain) ---------------------------
MESH_AXES = term("mesh_axes", "the named mesh axes the collective runs over (its device groups "
                 "mapped onto the run's mesh); device groups where no mesh is known")
DEVICE_BYTES = term("device_bytes", "the larger of the collective's input and output on "
                        "one device: the book's V (book §4.2)")
REASON = term("reason", "why the collective exists, in the book's terms (§4.1's four matmul "
              "cases, §6.1's schemes)")
WHY = term("why", "the reason in one sentence: which dot, which operand and dimension")
FIX = term("fix", "the book's fix, one line; empty where none is needed")
COLLECTIVES = (PROGRAM, OP, COLLECTIVE, SOURCE_LINE, SOURCE_OP, MESH_AXES, DEVICE_BYTES,
               COUNT, REASON, PREDICTED_S, MEASURED_S, EXPOSED_COMM_S, WHY, FIX)
# ranked by exposed_comm_s, then measured_s, then predicted_s (the most costly first)

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
PLAN = (LAYOUT, MESH, SPANS, PREDICTED_STEP_S, MFU_AT_ROOFLINE, PREDICTED_EXPOSED_COMM_S,
        PEAK_BYTES, REQUIRED_BYTES, FITS, BOOK_CONDITION, BOOK_BOUND, PREDICTED_BOUND, AGREE,
        ANALYTIC_S, PLAN_NOTE)

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
# (a predicted table from the HLO also has SOURCE_OP and SOURCE_LINE; one made by hand may leave
# them out)
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
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaError(f"{where}: missing columns {missing}; has {list(df.columns)}")
    return df


def empty(columns: Sequence[str]) -> pd.DataFrame:
    """An empty frame with the given columns."""
    import pandas as pd

    return pd.DataFrame({c: [] for c in columns})
