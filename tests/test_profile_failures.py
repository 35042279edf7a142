"""``harness profile`` on scripts that do not finish: one that raises (exit 1, its last frames
above the report), one whose process XLA-style aborts (exit 1, the report of the segments it
finished, the one it died in named), one interrupted by Ctrl-C (exit 130, the report of what it
ran), also while blocked in a call that never returns to Python, and while its last segment
takes too long to write out (that segment left out and named). Real subprocesses, short
segments where it matters."""
from __future__ import annotations

import re
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from profiling import HARNESS, env_for, executions, harness, report_of

from harness import schema

# the note of the segment a script ended in without writing it: (segment, how the script ended)
LOST = re.compile(r"segment (\d+) of the trace \(\d+\.\d s from \d\d:\d\d:\d\d UTC\) was not "
                  r"written: the script (.+)")

STEP = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import jax, jax.numpy as jnp, numpy as np
    step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    x = jax.device_put(np.ones((128, 128), np.float32))  # a copy, no program: the step runs alone

    def run(n):
        for _ in range(n):
            step(x).block_until_ready()

    def segment_done(k):
        # harness.capture.segments keeps capture.json beside a segment once its trace is written
        meta = Path(sys.argv[1]) / f"segment-{k:03d}" / "capture.json"
        while not meta.exists():
            time.sleep(0.02)
""")


def test_a_raising_script_exits_1_with_its_last_frame_above_the_report(tmp_path):
    script = STEP + textwrap.dedent("""
        def check(loss):
            raise ValueError(f"loss went up: {loss}")

        run(4)
        check(1.5)
    """)
    (tmp_path / "mine.py").write_text(script)
    line = script.splitlines().index('    raise ValueError(f"loss went up: {loss}")') + 1
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "mine.py", "unused")
    assert done.returncode == 1, done.stderr[-3000:]
    # Python's own traceback, from the script's first frame: the last frame is check's
    assert f'mine.py", line {line}, in check' in done.stderr
    assert "runpy" not in done.stderr and "harness/capture" not in done.stderr
    assert (f"harness profile: mine.py raised ValueError: loss went up: 1.5 (mine.py:{line} in "
            f"check); reporting what it ran before") in done.stderr
    report = report_of(done.stdout)
    assert executions(report) == {"jit__lambda": 4}
    assert report["notes"][0].startswith("the script raised ValueError: loss went up: 1.5")
    assert not list(tmp_path.glob("harness-profile-*"))


def test_an_aborting_script_exits_1_with_the_report_of_its_finished_segments(tmp_path):
    """3 steps in segment 0, 2 in segment 1, then an abort in segment 2: 5 steps reported."""
    (tmp_path / "mine.py").write_text(STEP + textwrap.dedent("""
        import os
        run(3)
        segment_done(0)
        run(2)
        segment_done(1)
        os.abort()
    """))
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "--segment-s",
                   "0.5", "--keep-trace", "kept", "mine.py", "kept")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Fatal Python error: Aborted" in done.stderr  # where it was (faulthandler)
    assert "harness profile: mine.py was killed by SIGABRT" in done.stderr
    report = report_of(done.stdout)
    assert executions(report) == {"jit__lambda": 5}
    assert report["notes"][0] == ("the script was killed by SIGABRT; this is the report of what "
                                  "it ran before")
    assert LOST.fullmatch(report["notes"][1]).group(1, 2) == ("2", "was killed by SIGABRT")
    assert report["meta"][schema.SCRIPT]["outcome"] == "died"
    assert report["meta"][schema.SCRIPT]["lost"]["segment"] == 2
    finished = sorted(p.parts[-5] for p in (tmp_path / "kept").rglob("*.xplane.pb"))
    assert finished == ["segment-000", "segment-001"]


def _ignore_sigint() -> None:
    """As a shell without job control starts a background job (``cmd &``): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted(tmp_path: Path, body: str, *argv: str, background: bool = False
                 ) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``body`` under harness profile, Ctrl-C it (SIGINT to harness) once it prints
    "ready" on stderr; the finished process and the seconds from SIGINT to its exit.
    ``background``: harness starts with SIGINT ignored, as a background job of a script does."""
    (tmp_path / "mine.py").write_text(STEP + textwrap.dedent(body))
    proc = subprocess.Popen([*HARNESS, "profile", "--chip", "cpu", "--format", "json", *argv,
                             "mine.py", "unused"], cwd=tmp_path, env=env_for(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if background else None)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.strip() == "ready":
            break
    else:
        raise AssertionError("".join(seen)[-3000:])
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(seen) + err), took


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_ctrl_c_ends_the_script_at_once_with_exit_130_and_the_report(tmp_path):
    done, took = _interrupted(tmp_path, """
        run(4)
        print("ready", file=sys.stderr, flush=True)
        while True:
            time.sleep(0.01)
    """)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "KeyboardInterrupt" in done.stderr  # the script's own traceback, as Python shows it
    report = report_of(done.stdout)
    assert executions(report) == {"jit__lambda": 4}
    assert report["notes"][0].startswith("the script was interrupted (Ctrl-C) and stopped ")
    assert took < 60, took  # the analysis included; the script itself stops in well under 1 s
    assert not list(tmp_path.glob("harness-profile-*"))


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_ctrl_c_ends_the_script_when_harness_started_as_a_background_job(tmp_path):
    """A background job of a shell without job control starts with SIGINT ignored (CI scripts,
    ``pytest &``): harness profile still takes the SIGINT, passes it on, and the script's process
    (started with Python's default handling, not the ignored one) stops as it does above."""
    done, took = _interrupted(tmp_path, """
        import signal
        assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        run(3)
        print("ready", file=sys.stderr, flush=True)
        while True:
            time.sleep(0.01)
    """, background=True)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "harness profile: mine.py was interrupted by SIGINT" in done.stderr
    assert executions(report_of(done.stdout)) == {"jit__lambda": 3}
    assert took < 60, took


def test_ctrl_c_ends_a_script_blocked_outside_python_and_keeps_its_trace(tmp_path):
    """SIGINT blocked in the script's main thread, which sleeps in C: Python never sees the
    interrupt there, so the process ends itself (harness.capture.interrupt.GRACE_S later),
    with the trace of what ran kept."""
    done, took = _interrupted(tmp_path, """
        import ctypes, signal
        run(2)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("ready", file=sys.stderr, flush=True)
        ctypes.CDLL(None).sleep(120)
    """)
    assert done.returncode == 130, done.stderr[-3000:]
    assert ("harness profile: mine.py was interrupted by SIGINT and, blocked outside Python, "
            "ended 2 s later") in done.stderr
    assert executions(report_of(done.stdout)) == {"jit__lambda": 2}
    assert took < 60, took


def test_ctrl_c_leaves_out_a_segment_that_takes_too_long_to_write_and_names_it(tmp_path):
    """Segment 0 (3 steps) written; then writing a segment takes a minute (the script slows
    jax.profiler.stop_trace down, as a long segment of a busy loop is): at Ctrl-C the process
    ends without it, the report is of segment 0 and names the segment left out."""
    done, _ = _interrupted(tmp_path, """
        import jax.profiler
        write = jax.profiler.stop_trace

        def slow_write():
            time.sleep(60)
            write()

        run(3)
        segment_done(0)
        jax.profiler.stop_trace = slow_write
        run(2)
        print("ready", file=sys.stderr, flush=True)
        while True:
            time.sleep(0.01)
    """, "--segment-s", "1", "--keep-trace", "unused")
    assert done.returncode == 130, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert executions(report) == {"jit__lambda": 3}  # the 2 after segment 0 were not written
    lost = report["meta"][schema.SCRIPT]["lost"]
    note = LOST.fullmatch(report["notes"][1])
    assert note.group(1, 2) == (str(lost["segment"]), "was interrupted (Ctrl-C)")
    # the segments kept are those before the one left out
    assert len(report["meta"][schema.SEGMENTS]) == lost["segment"] >= 1
    assert report["notes"][0].startswith("the script was interrupted (Ctrl-C) and stopped ")
