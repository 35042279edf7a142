"""The parts of ``harness profile`` on their own: a script's end as its process reports it, a
trace's segments merged on one clock, the recorded mesh each program ran on, the script's
commit, the device count forced over a script's own."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES

from harness import schema
from harness.capture import child, environment, script, segments
from harness.capture.interrupt import raising_sigint
from harness.capture.script import ScriptRun
from harness.capture.segments import segment_dir
from harness.devices import DEVICE_COUNT_ENV, device_count_flag, forced_device_count
from harness.explain.meshes import program_meshes
from harness.hlo import parse_module
from harness.measure.programs import programs_ran
from harness.trace.decode import decode, select
from harness.trace.load import TraceEvents
from harness.trace.located import locate
from harness.trace.segments import merge_segments


@pytest.mark.parametrize("body, outcome, code", [
    ("x = 1\n", "finished", 0),
    ("import sys\nsys.exit(0)\n", "finished", 0),
    ("import sys\nsys.exit(3)\n", "exited", 3),
    ("import sys\nsys.exit('no data')\n", "exited", 1),
    ("def f():\n    raise KeyError('w')\n\nf()\n", "raised", 1),
    ("raise KeyboardInterrupt\n", "interrupted", 130),
])
def test_the_script_process_says_how_the_script_ended(tmp_path, monkeypatch, body, outcome,
                                                      code):
    script = tmp_path / "mine.py"
    script.write_text(body)
    monkeypatch.setattr("sys.argv", [str(script)])
    status = child.run(script.resolve())
    assert (status[child.OUTCOME], status[child.CODE]) == (outcome, code)
    if outcome == "raised":
        assert status[child.MESSAGE] == "raised KeyError: 'w'"
        assert status[child.FRAME] == "mine.py:2 in f"


def test_a_script_whose_process_died_lost_the_segment_it_was_in():
    started = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc).timestamp()
    died = ScriptRun(Path("mine.py"), [], Path("t"), 30.0, -6,
                     lost={"segment": 2, "started": started, "s": 12.34})
    assert (died.outcome, died.exit_code) == ("died", 1)
    assert died.ended() == "was killed by SIGABRT"
    assert died.lost_note() == ("segment 2 of the trace (12.3 s from 03:04:05 UTC) was not "
                                "written: the script was killed by SIGABRT")
    interrupted = ScriptRun(Path("mine.py"), [], Path("t"), 30.0, 130, {
        child.OUTCOME: "interrupted", child.CODE: 130}, interrupted_s=3.1,
        lost={"segment": 0, "started": started, "s": 40.0})
    assert interrupted.lost_note() == ("segment 0 of the trace (40.0 s from 03:04:05 UTC) was "
                                       "not written: the script was interrupted (Ctrl-C)")
    raised = ScriptRun(Path("mine.py"), [], Path("t"), 30.0, 1, {
        child.OUTCOME: "raised", child.CODE: 1, child.MESSAGE: "raised KeyError: 'w'",
        child.FRAME: "mine.py:2 in f"})
    assert raised.ended() == "raised KeyError: 'w' (mine.py:2 in f)" and not raised.lost_note()
    stopped = ScriptRun(Path("mine.py"), [], Path("t"), 30.0, 130, {child.OUTCOME: "finished"},
                        interrupted_s=0.2)
    assert stopped.exit_code == 130  # the script finished after Ctrl-C: still interrupted


def test_the_segment_left_open_is_the_one_lost_and_what_was_written_of_it_goes(tmp_path):
    """A process that ended with segment 1 open (``OPEN``): segment 0 stays, segment 1's
    partial folder goes, and the record says it began when ``OPEN`` says."""
    for k in (0, 1):
        (segment_dir(tmp_path, k) / "plugins").mkdir(parents=True)
    (tmp_path / segments.OPEN).write_text(json.dumps({"segment": 1, "started": 1000.0}))
    lost = script._lost(tmp_path)
    assert (lost["segment"], lost["started"]) == (1, 1000.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segment-000"]
    assert script._lost(tmp_path) is None  # nothing open any more


def _segment(programs, steps, starts, trace_format="cpu"):
    return TraceEvents(pd.DataFrame({
        schema.PROGRAM: pd.Categorical(programs), schema.PROGRAM_ID: pd.Categorical(["1"] *
                                                                                   len(steps)),
        schema.OP: pd.Categorical(["dot"] * len(steps)), schema.DEVICE: [0] * len(steps),
        schema.STEP: pd.array(steps, dtype="int32"), schema.START_NS: starts,
        schema.DURATION_NS: [10] * len(steps)}), trace_format, "seg", stepped=False)


def test_segments_are_one_trace_on_the_first_ones_clock_with_steps_numbered_on():
    a = _segment(["jit_f", "jit_f"], [0, 1], [100, 200])
    b = _segment(["jit_g", "jit_f", "jit_f"], [0, 1, 2], [50, 150, 250])
    merged = merge_segments([a, b], [1_000, 5_000], "root (2 segments)")
    ev = merged.events
    # b started 4000 ns after a: its times move by 4000; its steps follow a's two
    assert ev[schema.START_NS].tolist() == [100, 200, 4_050, 4_150, 4_250]
    assert ev[schema.STEP].tolist() == [0, 1, 2, 3, 4]
    assert ev[schema.PROGRAM].astype(str).tolist() == ["jit_f", "jit_f", "jit_g", "jit_f",
                                                       "jit_f"]
    assert isinstance(ev[schema.PROGRAM].dtype, pd.CategoricalDtype)
    assert (merged.format, merged.stepped, merged.source) == ("cpu", False, "root (2 segments)")


def _host(kinds, starts, names):
    return pd.DataFrame({schema.HOST: 0, schema.KIND: kinds, schema.DEVICE: -1,
                         schema.START_NS: starts, schema.DURATION_NS: [5] * len(starts),
                         schema.EVENT_NAME: pd.Categorical(names)})


def test_segments_keep_their_host_events_on_the_same_clock():
    """The host's launches and annotations of each segment move with its ops (4000 ns for the
    second here): without them a script traced in segments could not tell dispatch from its own
    Python."""
    a = dataclasses.replace(_segment(["jit_f"], [0], [100]), host=_host(["dispatch"], [90], [""]))
    b = dataclasses.replace(_segment(["jit_f"], [0], [50]),
                            host=_host(["annotation", "dispatch"], [10, 40], ["load_batch", ""]))
    merged = merge_segments([a, b], [1_000, 5_000], "root (2 segments)")
    host = merged.host
    assert host[schema.START_NS].tolist() == [90, 4_010, 4_040]
    assert host[schema.KIND].tolist() == ["dispatch", "annotation", "dispatch"]
    assert host[schema.EVENT_NAME].astype(str).tolist() == ["", "load_batch", ""]
    assert merge_segments([_segment(["jit_f"], [0], [1])], [0], "one").host is None


def test_a_folder_of_segments_is_located_and_decoded_as_one_trace(tmp_path):
    """Two segments holding the same real trace (an MI300X's, on its own clock: both started
    at the same time) and a folder that is no segment: the segments found in order and read as
    one trace of twice the ops, the second's steps after the first's, each program's HLO."""
    trace = FIXTURES.parent / "external" / "mi300x-gemm" / "tw003.xplane.pb"
    for k in (1, 0):
        folder = segment_dir(tmp_path, k) / "plugins" / "profile" / "session"
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(trace.read_bytes())
    (tmp_path / "elsewhere").mkdir()
    found = locate(tmp_path)
    assert [p.relative_to(tmp_path).parts[0] for p in found.segments] == ["segment-000",
                                                                          "segment-001"]
    one, both = decode(locate(trace)), decode(found)
    ev, steps = one.trace.events, int(one.trace.events[schema.STEP].max()) + 1
    assert both.label == f"{tmp_path} (2 segments)"
    assert len(both.trace.events) == 2 * len(ev)
    assert both.trace.events[schema.STEP].tolist() == (ev[schema.STEP].tolist()
                                                       + (ev[schema.STEP] + steps).tolist())
    assert both.trace.events[schema.START_NS].tolist() == 2 * ev[schema.START_NS].tolist()
    # the host's launches of both segments, each as the one trace's (both began at once)
    host = one.trace.host
    assert len(host) and sorted(both.trace.host[schema.START_NS].tolist()) == sorted(
        2 * host[schema.START_NS].tolist())
    # every program that ran has its HLO (the trace embeds each), the segments' as one's
    assert set(both.modules) == set(one.modules) == set(programs_ran(ev))
    assert select(both, "all") == "all"


def _mesh(axes: dict, devices=range(8)) -> dict:
    return {"axes": axes, "devices": list(devices)}


def test_each_program_is_named_after_the_recorded_mesh_its_groups_fit():
    """The all-reduce's groups {0,2,4,6} {1,3,5,7} of 8 partitions: a whole axis X of X=4,Y=2,
    axes a,b of a=2,b=2,c=2, no whole axis of data=8, and data=4 has too few devices."""
    module = parse_module((FIXTURES / "matmul_allreduce_groups.txt").read_text())
    modules = {(module.name, "1"): module}
    meshes = [_mesh({"data": 4}, range(4)), _mesh({"X": 4, "Y": 2}), _mesh({"data": 8}),
              _mesh({"a": 2, "b": 2, "c": 2})]
    chosen, notes = program_meshes(modules, {schema.MESHES: meshes})
    assert chosen == {(module.name, "1"): {"X": 4, "Y": 2}}  # the first built that fits
    assert notes == [f"{module.name}: its collectives fit 2 of the meshes the script built; "
                     f"their axes are named after X=4,Y=2, not a=2,b=2,c=2"]
    # the program ran on devices 8..15: the mesh over those devices is the one
    meshes[3] = _mesh({"a": 2, "b": 2, "c": 2}, range(8, 16))
    ran = pd.DataFrame({schema.PROGRAM: [module.name] * 8, schema.DEVICE: range(8, 16)})
    chosen, _ = program_meshes(modules, {schema.MESHES: meshes}, ran)
    assert chosen == {(module.name, "1"): {"a": 2, "b": 2, "c": 2}}
    assert program_meshes(modules, {}) == ({}, [])


def test_the_commit_is_that_of_the_scripts_folder(tmp_path):
    repo = tmp_path / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "src/train.py"],
                 ["-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert environment.git_state(repo / "src") == {schema.GIT_SHA: sha, schema.GIT_DIRTY: False}
    outside = tmp_path / "loose"
    outside.mkdir()
    assert environment.git_state(outside) == {}


def test_devices_are_forced_over_the_scripts_own_flags():
    env = forced_device_count({"XLA_FLAGS": "--xla_force_host_platform_device_count=4 --x=1"},
                              2)
    assert env[DEVICE_COUNT_ENV] == "2"  # jax's own setting, which beats the script's flags
    assert device_count_flag(env["XLA_FLAGS"]) == 2 and "--x=1" in env["XLA_FLAGS"]
    assert device_count_flag("--xla_cpu_foo=1") is None


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_an_interrupted_script_that_does_not_stop_is_killed(monkeypatch):
    """Ctrl-C, then a process that ignores it (its own process ends itself at once, writing
    nothing more: harness.capture.child): killed KILL_AFTER_S after the Ctrl-C."""
    import os
    import signal
    import sys
    import threading

    monkeypatch.setattr(script, "KILL_AFTER_S", 0.2)
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                 "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"])
    # the terminal's Ctrl-C, caught by _wait; raised as run_script raises it (Python's default
    # handling, where pytest itself runs as a background job with SIGINT ignored)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    try:
        with raising_sigint():
            returncode, interrupted_s, killed = script._wait(stubborn)
    finally:
        stubborn.kill()
    assert killed and returncode == -signal.SIGKILL and interrupted_s is not None
