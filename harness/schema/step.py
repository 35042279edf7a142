"""The step as a whole (``harness.step``): the simulated step's figures and the critical path,
the timeline's columns per (step, device), the step object and one step's op intervals."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import DEVICE, DURATION_NS, HOST, OP, START_NS, STEP

# --- the simulated step ------------------------------------------------------------------
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
STEP_COLLECTIVES = "collectives"     # per communication op: comm_s and exposed_comm_s per step;
#                                      a collective also LAST_ARRIVAL: the unit last to arrive
#                                      most often, and by how much (harness.step.stragglers)
LAST_ARRIVAL = "last_arrival"
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

# --- why the devices wait (harness.step.waits), per (step, device) -------------------------
# A step's period runs from its first op's start to the next step's first op's start (the last
# step's ends at its last op's end); the time a device waits in it is the period's idle (the
# step window's and the gap to the next step) and its waits at collectives for its peers, split
# by cause; the causes add up to WAITING_S.
PERIOD_S = term("period_s", "the step's period: its first op's start to the next step's")
WAITING_S = term("waiting_s", "time in the period a device waited: idle, and at collectives for "
                 "its peers")
WAIT_DISPATCH_S = term("wait_dispatch_s", "waiting for the host to dispatch: idle between two "
                       "programs' executions (between steps) while the runtime launched the "
                       "next (its Execute events)")
WAIT_PYTHON_S = term("wait_python_s", "waiting on the host's own work: idle between two "
                     "executions while the host ran code no runtime event covers (the user's "
                     "Python between steps: data loading, logging)")
WAIT_INPUT_S = term("wait_input_s", "waiting on input: idle while a host-to-device copy or an "
                    "infeed ran")
WAIT_PEERS_S = term("wait_peers_s", "waiting for peers: in a collective before the last device "
                    "of its group arrived")
WAIT_CORE_S = term("wait_core_s", "waiting for a CPU core: idle inside a program while as many "
                   "other device threads ran as the host has cores")
WAIT_HOST_S = term("wait_host_s", "waiting on the host: idle while a host callback or a "
                   "device-to-host transfer ran")
WAIT_UNEXPLAINED_S = term("wait_unexplained_s", "waiting no event of the trace explains")
WAIT_CAUSES = (WAIT_DISPATCH_S, WAIT_PYTHON_S, WAIT_INPUT_S, WAIT_PEERS_S, WAIT_CORE_S,
               WAIT_HOST_S, WAIT_UNEXPLAINED_S)
# The step object's waits (STEP_OBJECT): PERIOD_S, WAITING_S and each cause of the median
# step (by period; each figure its devices' mean), the verdict line where one cause dominates,
# the causes the trace cannot tell apart (a sentence), the stragglers named
WAIT_VERDICT = "wait_verdict"
WAIT_BOUND = term("wait_bound", "the cause that dominates the devices' wait (dispatch-, "
                  "python-, input-, sync-, core- or host-callback-bound) or the straggler "
                  "named (straggler: process 1)")
WAITS_UNTOLD = "waits_untold"
WAIT_EVENTS = "wait_events"          # the host events the causes were read from: kind -> count
#                                      (within the measured steps; harness.trace.host_events)
WAIT_PYTHON_NAMES = "wait_python_names"  # the python wait's names: name -> seconds, the
#                                      median step's few longest (WAIT_NAMES; verdict.named)
STRAGGLERS = "stragglers"            # [{unit ("device"/"process"), id, op, late_s, last_share}]
STRAGGLER_UNIT = "unit"
STRAGGLER_ID = "id"
LATE_S = term("late_s", "per step, how much later a device reached its collectives than the "
              "next-latest of its group (the time the group waited for it alone)")
LAST_SHARE = "last_share"            # the share of steps in which it arrived last
# --- the pipeline bubble (harness.step.bubble): a pipelined run's stage iterations that carry
# no microbatch, counted from the schedule it ran (its config), priced in time
BUBBLE = "bubble"                    # the count: stages, microbatches, schedule, repeats, slots,
#                                      idle_slots, ticks, loop_s (the stage loop's time)
BUBBLE_SHARE = term("bubble_share", "share of a pipelined step's stage iterations (stage, tick, "
                    "forward or backward) that carry no microbatch, counted from its schedule")
BUBBLE_S = term("bubble_s", "the pipeline bubble's time per step: the schedule's bubble share "
                "of stage-time x the measured stage loop")
BUBBLE_LINE = "bubble_line"          # the sentence the report prints
# Host events (harness.trace.host_events): what the host did that a device can wait on
# (KIND: "dispatch", "input" or "host", the causes harness.step.waits reads them as, or
# "annotation": the user's TraceAnnotations and Python frames, which name the host's own work;
# DEVICE -1: every device of the host), each with its name as the trace gives it
EVENT_NAME = "event_name"
HOST_EVENTS = (HOST, KIND, DEVICE, START_NS, DURATION_NS, EVENT_NAME)
# The python part of each (step, host, device)'s wait (WAIT_PYTHON_S) by the name of the user's
# annotation or Python frame that covers it (harness.step.between.python_names)
WAIT_NAMES = (STEP, HOST, DEVICE, EVENT_NAME, WAIT_PYTHON_S)

# --- tables -------------------------------------------------------------------------------
STEP_TIMES = (STEP, DEVICE, TIMELINE_STEP_S, COMPUTE_S, COMM_S, OVERLAPPED_COMM_S, EXPOSED_COMM_S,
              IDLE_S)
WAITS = (STEP, HOST, DEVICE, PERIOD_S, WAITING_S, *WAIT_CAUSES)
