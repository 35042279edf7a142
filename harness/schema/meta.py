"""Run metadata: the keys of a run's meta.json, and the formats its report renders to."""
from __future__ import annotations

# --- run metadata (meta.json; harness.capture.environment writes the machine's) ----------------
# The formats a run's report renders to (harness.report.document.FORMATS implements each).
REPORT_FORMATS = ("csv", "html", "json", "md", "text")

TITLE = "title"
SUMMARY = "summary"                # the summary figures (harness.schema.summary)
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
OP_TIMING = "op_timing"            # what measured_s is: measure.shares.HOST_TIME or DEVICE_MEDIAN
HARNESS_VERSION = "harness_version"  # the scaling-harness that measured it (environment())
MESHES = "meshes"                  # every mesh a profiled script built (harness.capture.meshes):
#                                    [{"axes": {name: size}, "devices": [device ids, mesh order]}]
SEGMENTS = "segments"              # a profiled script's trace segments, each one's recording
#                                    window as its trace says: [[start, stop]] in unix seconds
REPEAT = "repeat"                  # which of a sweep point's repeated runs this is, 0-based
#                                    (harness sweep --repeat N: replicates of one side, each in
#                                    a fresh process; their spread is the point's own noise,
#                                    harness.regress.noise)
SCRIPT = "script"                  # a profiled script: {"path", "args", "outcome"}
# WORKLOAD, PRESET, MESH, CHIP (harness.schema.summary), PROGRAM and PROGRAM_ID
# (harness.schema.ops) are meta keys too (PROGRAM and PROGRAM_ID: the step program, the
# compilation the run's step line and summary are of).
