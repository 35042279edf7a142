"""Stage 1 for a script of the user's own (``harness profile``): run it in a process of its own,
as ``python SCRIPT ARGS`` runs it, traced in segments (``harness.capture.child``), and say how
it ended.

Its process gets this one's environment: the ``XLA_FLAGS`` the script sets before it imports
jax, else the environment's, choose its CPU devices; ``devices`` forces a count over both
(``harness.devices.forced_device_count``). Ctrl-C here is passed on to it (it stops at once and
keeps the segments it finished: ``harness.capture.interrupt``); one still running
``KILL_AFTER_S`` later, or at a second Ctrl-C, is killed. A process that dies (XLA aborts it)
leaves the segments it finished too. The segment a process ended in without writing it
(``harness.capture.segments.OPEN``) is the run's ``lost`` record; whatever of it was written is
removed.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.capture.child import FRAME, MESSAGE, OUTCOME, STATUS_FILE
from harness.capture.interrupt import INTERRUPTED, raising_sigint
from harness.capture.segments import OPEN, SEGMENT, SEGMENT_S, STARTED, open_segment, segment_dir
from harness.devices import DEVICE_COUNT_ENV, forced_device_count

KILL_AFTER_S = 15.0  # seconds an interrupted script has to end before it is killed
FINISHED = "finished"
LOST_S = "s"  # a lost record's seconds, from its segment's start to the process's end


@dataclass
class ScriptRun:
    """How a script ran: where its trace is (``root``: a folder of segments), what its process
    said of its end (``status``: ``harness.capture.child``'s, {} when the process died before it
    could), its exit status (negative: the signal that ended it) and, when it was interrupted
    here, the seconds from the first Ctrl-C to its end; ``lost``: the segment it ended in
    without writing it ({"segment": k, "started": s since the epoch, "s": seconds}), if any."""

    script: Path
    args: list[str]
    root: Path
    segment_s: float
    returncode: int
    status: dict = field(default_factory=dict)
    devices: int | None = None  # the count forced (--devices), if any
    given: dict = field(default_factory=dict)  # the device settings of the environment given
    interrupted_s: float | None = None
    killed: bool = False        # killed here: it did not end after Ctrl-C
    lost: dict | None = None

    @property
    def outcome(self) -> str:
        """finished, exited, raised, interrupted (the script's word); died (its process)."""
        return self.status.get(OUTCOME) or "died"

    @property
    def exit_code(self) -> int:
        """``harness profile``'s: 130 interrupted, 0 finished, else 1."""
        if self.interrupted_s is not None or self.outcome == INTERRUPTED:
            return 130
        return 0 if self.outcome == FINISHED else 1

    def ended(self) -> str:
        """How it ended, one line ("" for a script that finished): "raised ValueError: boom
        (mine.py:12 in main)", "was killed by SIGABRT", ..."""
        if self.killed:
            return f"did not stop within {KILL_AFTER_S:g} s of Ctrl-C and was killed"
        if self.outcome == "died":
            return (f"was killed by {_signal_name(-self.returncode)}" if self.returncode < 0
                    else f"ended with exit status {self.returncode} before its trace was kept")
        if self.outcome == FINISHED:
            return ""
        frame = self.status.get(FRAME)
        return self.status.get(MESSAGE, self.outcome) + (f" ({frame})" if frame else "")

    def lost_note(self) -> str:
        """What the trace lacks of the run, "" for nothing: "segment 1 of the trace (12.3 s from
        06:01:58 UTC) was not written: the script was interrupted (Ctrl-C)"."""
        if not self.lost:
            return ""
        when = dt.datetime.fromtimestamp(self.lost[STARTED], dt.timezone.utc)
        why = ("was interrupted (Ctrl-C)" if self.interrupted_s is not None and not self.killed
               else self.ended() or "was interrupted by SIGINT")
        return (f"segment {self.lost[SEGMENT]} of the trace ({self.lost[LOST_S]:.1f} s from "
                f"{when:%H:%M:%S} UTC) was not written: the script {why}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wait(proc: subprocess.Popen) -> tuple[int, float | None, bool]:
    """(exit status, seconds from the first Ctrl-C to the end or None, whether killed here)."""
    interrupted, killed = None, False
    while True:
        try:
            left = None if interrupted is None else (
                max(interrupted + KILL_AFTER_S - time.monotonic(), 0.0))
            return proc.wait(timeout=left), _since(interrupted), killed
        except KeyboardInterrupt:
            if interrupted is None:
                interrupted = time.monotonic()
                proc.send_signal(signal.SIGINT)
            else:  # a second Ctrl-C: now
                proc.kill()
                killed = True
        except subprocess.TimeoutExpired:
            proc.kill()
            killed = True


def _since(t: float | None) -> float | None:
    return None if t is None else time.monotonic() - t


def _lost(root: Path) -> dict | None:
    """The segment the ended process left unwritten (``OPEN``), its folder removed: what was
    written of it, if anything, is not a whole trace."""
    found = open_segment(root)
    if found is None:
        return None
    shutil.rmtree(segment_dir(root, found[SEGMENT]), ignore_errors=True)
    (root / OPEN).unlink(missing_ok=True)
    started = float(found.get(STARTED) or time.time())
    return {SEGMENT: found[SEGMENT], STARTED: started,
            LOST_S: max(time.time() - started, 0.0)}


def run_script(script: Path, args: list[str], root: Path, *, devices: int | None = None,
               segment_s: float = SEGMENT_S) -> ScriptRun:
    """Run ``script`` with ``args`` in a process of its own, traced in segments into ``root``
    (made if absent); ``devices``: that many CPU devices whatever the script sets."""
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    given = {k: env[k] for k in ("XLA_FLAGS", DEVICE_COUNT_ENV) if k in env}
    if devices is not None:
        env = forced_device_count(env, devices)
    # harness.capture.child with the out-of-memory guard (harness.memory.guard)
    cmd = [sys.executable, "-m", "harness.memory.guard", str(root), repr(float(segment_s)),
           str(script), *args]
    # SIGINT handled here (not ignored, as a background job starts): passed on to the script's
    # process, which starts with Python's default handling of it (a handled signal is reset at
    # exec; an ignored one would stay ignored)
    with raising_sigint():
        proc = subprocess.Popen(cmd, env=env)
        returncode, interrupted_s, killed = _wait(proc)
    try:
        status = json.loads((root / STATUS_FILE).read_text())
    except (OSError, ValueError):  # its process died before it could say
        status = {}
    return ScriptRun(script, list(args), root, segment_s, returncode,
                     status if isinstance(status, dict) else {}, devices, given, interrupted_s,
                     killed, _lost(root))
