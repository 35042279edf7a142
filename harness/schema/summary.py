"""Summary figures: a sweep's, one row per point (``harness sweep``), and a run's
(meta.json "summary", each defined once in ``harness.analysis.gaps``); which are shown as
percentages (``FRACTIONS``) and which as multiples (``RATIOS``)."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import COLLECTIVE, DEVICES, EFFICIENCY, GROUP_SIZE, SHARE, WAIT_S
from harness.schema.routed import WASTE
from harness.schema.step import (
    EXPOSED_COMM_S,
    IDLE_S,
    PREDICTED_STEP_S,
    WAIT_BOUND,
    WAITING_S,
)

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
STEPS_RUN = "steps_run"            # steps a capture ran in all: warm-up, traced and timed
# program -> each entry parameter's path in the user's code: a list by parameter number
# (harness.analyze), or JAX's name -> path (harness profile's nnx.jit programs)
ARGUMENT_PATHS = "argument_paths"
HOST_DEVICE_COUNT = "host_device_count"  # the process's devices, where the program ran on fewer
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
HOST_SPREAD = term("host_spread", "CPU: how far the host's cores moved speed while it was "
                   "calibrated (fastest / slowest): a figure above the roofline by less is "
                   "within it (~)")  # harness.chip.spells

# --- run summary (meta.json "summary"): one figure each, defined in harness.analysis.gaps ---------
# STEP_S, WALL_STEP_S, COVERAGE, MFU, MODEL_FLOPS and ANALYTIC_S above, and EFFICIENCY and
# DEVICES (harness.schema.ops), are summary keys too.
MEASURED_OPS_S = term("measured_ops_s", "the step's ops' measured times, summed")
PREDICTED_OPS_S = term("predicted_ops_s", "the modeled ops' roofline times, summed (no overlap)")
HLO_FLOPS_PER_DEVICE = term("hlo_flops_per_device", "the compiled program's FLOPs per device "
                            "per step")
HFU = term("hfu", "hardware FLOPs utilisation: the compiled program's FLOPs / (step x peak "
           "FLOP/s)")
ANALYTIC_FORMULA = term("analytic_formula", "the book's formula behind analytic_s")
FLOPS_VS_COST_ANALYSIS = "flops_vs_cost_analysis"  # our HLO FLOPs vs XLA's, relative difference
FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE = "flops_vs_cost_analysis_loops_once"  # same, loops once
MFU_AT_ROOFLINE = term("mfu_at_roofline", "MFU if the step ran at predicted_step_s")
FIGURES = (STEP_S, WALL_STEP_S, GRAPH_STEP_S, TRACE_OVERHEAD, MEASURED_OPS_S, PREDICTED_OPS_S,
           COVERAGE, EFFICIENCY, HLO_FLOPS_PER_DEVICE, HFU, DEVICES, MODEL_FLOPS, MFU, MFU_BOOK,
           MFU_FORMULA,
           ANALYTIC_S, ANALYTIC_FORMULA, FLOPS_VS_COST_ANALYSIS,
           FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE, PREDICTED_STEP_S, MFU_AT_ROOFLINE, WAIT_S,
           BUS_BYTES, MEASURED_BUS_GBPS, PREDICTED_BUS_GBPS)
# shown as percentages
FRACTIONS = (EFFICIENCY, SHARE, COVERAGE, MFU, MFU_BOOK, HFU, MFU_AT_ROOFLINE, MATMUL_EFFICIENCY,
             HOST_SPEED, WASTE)
# repeated work (harness.explain.redundant)
REPEAT = term("repeat", "how many devices compute the same thing: the product of the axes the "
              "op's work is not split over (1.0x: no repeated work)")
REPLICATED_AXES = term("replicated_axes", "the mesh axes over which the op repeats its work "
                       "(its operands are not split over them)")
REDUNDANT_WORK = term("redundant_work", "the program's FLOPs (per device x devices) over the "
                      "model's FLOPs: above 1.0x the layout repeats work")
# shown as multiples ("1.05x")
RATIOS = (TRACE_OVERHEAD, REPEAT, REDUNDANT_WORK, HOST_SPREAD)
# fractions of a roofline or a peak: above 100% is impossible (harness.analysis.gaps.beats_roofline)
ROOFLINE_FRACTIONS = (EFFICIENCY, MATMUL_EFFICIENCY, MFU, MFU_BOOK, HFU)

# --- tables -------------------------------------------------------------------------------
SWEEP_SUMMARY = (POINT, WORKLOAD, PRESET, MESH, CHIP, OVERRIDES, STATUS, STEP_S, EXPOSED_COMM_S,
                 IDLE_S, WAITING_S, WAIT_BOUND, PREDICTED_STEP_S, WALL_STEP_S, COVERAGE,
                 EFFICIENCY, MFU, ANALYTIC_S,
                 COLLECTIVE, GROUP_SIZE, MESSAGE_BYTES, COLLECTIVE_S, BUS_BYTES, MEASURED_BUS_GBPS,
                 PREDICTED_BUS_GBPS, MODEL_FLOPS, MATMUL_EFFICIENCY, HOST_SPEED, HOST_SPREAD,
                 SERIES, ERROR, RUN, KEY)
