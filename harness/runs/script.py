"""The run of a script of the user's own (``harness profile``): its trace's segments read as one
trace by ``harness.runs.pipeline.analyze_trace`` (with the meta its process kept beside them:
its devices, ``XLA_FLAGS``, commit, meshes), then what the trace alone cannot say: where its
device count came from, how it ended, what the trace lacks.

The cpu chip a CPU run is predicted for is calibrated on as many devices as the script had, so
this process's jax is given that many before it starts (``devices_for_analysis``).
"""
from __future__ import annotations

import json
import logging
import os
import sys

from harness import schema
from harness.capture.profiler import CAPTURE_FILE
from harness.capture.script import ScriptRun
from harness.devices import DEVICE_COUNT_ENV, device_count_flag, forced_device_count
from harness.errors import HarnessError
from harness.record import Run
from harness.trace.load import read_xspace
from harness.trace.segments import segment_traces, session_window

log = logging.getLogger(__name__)


class NoTrace(HarnessError):
    """The script's process kept no segment of its trace."""


def _saved_meta(ran: ScriptRun) -> dict:
    """The meta the script's process kept beside its last finished segment ({} for none)."""
    traces = segment_traces(ran.root)
    if not traces:
        return {}
    try:
        return json.loads((traces[-1].parents[3] / CAPTURE_FILE).read_text()).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return {}


def devices_for_analysis(meta: dict) -> None:
    """Give this process's jax the script's CPU device count, if jax has not started here."""
    n = meta.get(schema.DEVICE_COUNT)
    if meta.get("backend") != "cpu" or not isinstance(n, int) or "jax" in sys.modules:
        return
    os.environ.update(forced_device_count(dict(os.environ), n))


def device_note(ran: ScriptRun, meta: dict) -> str:
    """"the script ran on 4 cpu devices (XLA_FLAGS set by the script)": where the count of a
    CPU run came from."""
    n, backend = meta.get(schema.DEVICE_COUNT), meta.get("backend", "")
    if not n:
        return ""
    why = ""
    if backend == "cpu":
        own, given = meta.get(schema.XLA_FLAGS, ""), ran.given.get("XLA_FLAGS", "")
        if ran.devices is not None:
            why = f"--devices {ran.devices}"
        elif DEVICE_COUNT_ENV in ran.given:
            why = f"{DEVICE_COUNT_ENV}={ran.given[DEVICE_COUNT_ENV]} in the environment"
        elif (meta.get("jax_num_cpu_devices") or -1) > 0:
            why = "jax_num_cpu_devices set by the script"
        elif device_count_flag(own) is not None and own != given:
            why = "XLA_FLAGS set by the script"
        elif device_count_flag(given) is not None:
            why = "XLA_FLAGS in the environment"
        else:  # jax's default is one CPU device; more came from where the harness cannot see
            why = "jax's default" if n == 1 else "set where the harness cannot see"
    return f"the script ran on {n} {backend} device{'s' * (n != 1)}" + (f" ({why})" if why else "")


def segment_windows(ran: ScriptRun) -> list[list[float]]:
    """Each finished segment's recording window, [start, stop] in seconds since the epoch, as
    its trace says (``harness.trace.segments.session_window``)."""
    windows = [session_window(read_xspace(path)[0]) for path in segment_traces(ran.root)]
    return [[w[0] / 1e9, w[1] / 1e9] for w in windows if None not in w]


def segments_note(ran: ScriptRun, windows: list[list[float]]) -> str:
    """How the trace was cut: its segments and the time between them (the profiler writing one
    segment out and starting the next), which it lacks."""
    if len(windows) < 2:
        return ""
    gaps = sum(max(b[0] - a[1], 0.0) for a, b in zip(windows, windows[1:]))
    traced = sum(b - a for a, b in windows)
    return (f"traced in {len(windows)} segments of up to {ran.segment_s:g} s; the "
            f"{len(windows) - 1} gaps between them ({gaps:.2g} s in all, against {traced:.3g} s "
            f"traced) are not in the trace")


def ending_note(ran: ScriptRun) -> str:
    """How the script ended, where it did not finish: the report is of what it ran."""
    if ran.interrupted_s is not None and not ran.killed:
        return (f"the script was interrupted (Ctrl-C) and stopped {ran.interrupted_s:.1f} s "
                f"later; this is the report of what it ran")
    ended = ran.ended()
    return f"the script {ended}; this is the report of what it ran before" if ended else ""


def oom_answer(ran: ScriptRun) -> str:
    """The answer for a script that ran out of memory ("" for one that did not): the guard's
    in its process (``harness.memory.guard``), else one made from XLA's message alone."""
    from harness.capture.child import MESSAGE
    from harness.capture.memory import OOM_MARKERS
    from harness.memory import oom
    from harness.memory.guard import OOM_FILE

    try:
        return str(json.loads((ran.root / OOM_FILE).read_text())["answer"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    said = ran.status.get(MESSAGE, "")
    if not any(m in said for m in OOM_MARKERS):
        return ""
    return str(oom.answer(ran.script.name, None, None, None, error=said))


def analyze_script(ran: ScriptRun, *, chip=None, program: str = "", keep: bool = False) -> Run:
    """The run of everything the script ran (``program``: one compilation or name), predicted
    for ``chip`` (default: the device it ran on). Its trace folder, the meta's
    ``schema.TRACE_FILE``, is the run's to store (``Run.save`` moves it; ``keep``: copies it,
    the folder the user's)."""
    from harness.runs import pipeline

    if not segment_traces(ran.root):
        why = ran.lost_note() or f"the script {ran.ended() or 'ran no JAX program'}"
        raise NoTrace(f"{ran.script}: no trace was kept ({why})")
    meta = _saved_meta(ran)
    devices_for_analysis(meta)
    run = pipeline.analyze_trace(ran.root, chip=chip, program=program)
    windows = segment_windows(ran)
    notes = [ending_note(ran), ran.lost_note(), device_note(ran, run.meta),
             segments_note(ran, windows)]
    run.notes[:0] = [n for n in notes if n]
    run.meta[schema.SEGMENTS] = windows
    run.meta[schema.TRACE_FILE] = str(ran.root.resolve())
    run.meta[schema.SCRIPT] = {"path": str(ran.script), "args": ran.args,
                               "outcome": ran.outcome, **({"lost": ran.lost} if ran.lost else {})}
    run.capture.trace_dir, run.capture.owned = ran.root, not keep
    return run
