"""``harness sweep``: file validation (line and key), failure recording, kill and resume, summary.

Points are tiny (steps=2, warmup=1) and predicted for an explicit chip, so no CPU calibration
runs inside the tests.
"""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

import workloads
from harness import cli, schema
from harness.record import Run, store
from harness.sweep import report as sweep_report
from harness.sweep import run as sw
from harness.sweep.grid import SweepFileError, load_sweep

REPO = Path(__file__).resolve().parents[1]
CHIP = "tpu-v5e"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write(directory: Path, text: str, name: str = "s.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _harness(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _complete_runs(directory: Path) -> list[Path]:
    """Run directories holding meta.json, below ``directory`` (any depth)."""
    return sorted(p.parent for p in directory.rglob(store.META))


def _stray(directory: Path) -> list[Path]:
    return sorted(directory.rglob(f"{store.TMP_PREFIX}*"))


# --- malformed files: rejected before anything runs, naming line and key ----------------------

GOOD_BLOCK = """
[[grid]]
workload = "matmul"
"""

MALFORMED = {
    "unknown top-level key": ("""
        name = "bad"
        stepz = 3
        [[grid]]
        workload = "matmul"
        """, 2, "stepz", ["unknown key", "steps", "warmup", "grid"]),
    "wrong type": ("""
        # a comment
        steps = "three"
        [[grid]]
        workload = "matmul"
        """, 2, "steps", ["integer", "'three'"]),
    "unknown grid key": ("""
        [[grid]]
        workload = "collective"
        meshes = ["8"]
        """, 3, "grid[1].meshes", ["unknown key", "mesh", "preset", "set"]),
    "unknown workload": ("""
        [[grid]]
        workload = "matmul"
        [[grid]]
        workload = "matmull"
        """, 4, "grid[2].workload", ["matmull", "collective", "llama_train"]),
    "unknown config field": ("""
        [[grid]]
        workload = "matmul"
        [grid.set]
        case = "no_comm"
        Bee = [1, 2]
        """, 5, "grid[1].set.Bee", ["Bee", "B, D, F"]),
    "wrong field type": ("""
        [[grid]]
        workload = "matmul"
        set.B = 256.5
        """, 3, "grid[1].set.B", ["integer", "256.5"]),
    "invalid field value": ("""
        [[grid]]
        workload = "matmul"
        [grid.set]
        case = ["no_comm", "bogus"]
        """, 4, "grid[1].set.case", ["bogus", "no_comm", "allreduce"]),
    "invalid mesh string": ("""
        [[grid]]
        workload = "matmul"
        mesh = ["4x2", "4by2"]
        """, 3, "grid[1].mesh", ["4by2", "4x2"]),
    "a mesh by role for a workload without layouts": ("""
        [[grid]]
        workload = "collective"
        mesh = "fsdp=4,model=2"
        """, 3, "grid[1].mesh", ["fsdp=4,model=2", "collective", "roles", "4x2"]),
    "a mesh by role that no layout has": ("""
        [[grid]]
        workload = "llama_train"
        mesh = "model=4,fsdp=2,data=1"
        """, 3, "grid[1].mesh", ["model=4,fsdp=2,data=1"]),
    "unknown chip": ("""
        chip = "tpu-v9"
        [[grid]]
        workload = "matmul"
        """, 1, "chip", ["tpu-v9", "tpu-v5e", "h100"]),
    "key after a multi-line array": ("""
        [[grid]]
        workload = "collective"
        [grid.set]
        nbytes = [
          4096,   # [ a bracket in a comment
          8192,
        ]
        kinds = ["all_gather"]
        """, 8, "grid[1].set.kinds", ["kind", "nbytes"]),
    "not TOML": ("""
        [[grid]]
        workload = "matmul"
        steps = 3 3
        """, 3, "(file)", ["TOML"]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_names_line_and_key(tmp_path, case):
    text, line, key, words = MALFORMED[case]
    path = _write(tmp_path, text)
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    e = info.value
    assert (e.line, e.key) == (line, key), str(e)
    assert str(e).startswith(f"{path}:{line}: {key}: ")
    assert "\n" not in str(e)
    for w in words:
        assert w in str(e), (w, str(e))
    # the command rejects it with exit 2 before anything runs
    out = tmp_path / "out"
    rc, _, stderr = _harness("sweep", path, "--out", out)
    assert rc == 2
    assert f"{path}:{line}: {key}" in stderr
    assert not out.exists()


def test_a_mesh_named_by_role_sets_the_layout_as_run_does(tmp_path):
    grid = load_sweep(_write(tmp_path, """
        [[grid]]
        workload = "llama_train"
        mesh = ["fsdp=4,model=2", "X=8", "4x2"]
        """))
    # by role: kept as written, the layout it implies set (harness run --mesh does the same);
    # by letter or shape: the shape, no layout set (the workload's default)
    assert [(p.mesh, p.overrides.get("parallelism")) for p in grid.points] == [
        ("fsdp=4,model=2", "fsdp_tp"), ("8", None), ("4x2", None)]
    assert len({p.key for p in grid.points}) == 3


def test_expansion_keys_and_duplicates(tmp_path):
    path = _write(tmp_path, """
        steps = 2
        [[grid]]
        workload = "collective"
        mesh = ["8", "4X2"]
        [grid.set]
        kind = ["all_gather", "all_reduce"]
        nbytes = [4096, 8192, 16384]
        [[grid]]
        workload = "collective"
        mesh = "4x2"
        [grid.set]
        kind = "all_reduce"
        nbytes = 8192
        [[grid]]
        workload = "matmul"
        warmup = 0
        """)
    grid = load_sweep(path)
    assert grid.name == "s"  # the file's stem
    # 2 meshes x 2 kinds x 3 sizes, the second block repeats one of them, plus one matmul
    assert len(grid.points) == 2 * 2 * 3 + 1
    first = grid.points[0]
    assert (first.workload, first.mesh, first.overrides, first.steps, first.warmup) == \
        ("collective", "8", {"kind": "all_gather", "nbytes": 4096}, 2, 2)
    assert grid.points[6].mesh == "4x2"  # "4X2" normalised
    last = grid.points[-1]
    assert (last.workload, last.mesh, last.preset, last.warmup) == ("matmul", "4x2", "tiny", 0)
    keys = [p.key for p in grid.points]
    assert len(set(keys)) == len(keys)
    assert keys == [p.key for p in load_sweep(path).points]  # stable
    path.write_text(path.read_text().replace("steps = 2", "steps = 3"))
    assert not set(keys) & {p.key for p in load_sweep(path).points}  # steps are part of a point


@pytest.mark.parametrize("name, points", [
    ("quick", 2 * 2 * 4 + 2 * 3),
    ("tpu-vm", 2 * 5 * 6 + 2 * 3 + 4 * 3 + 2 + 2),
    ("gpu-8", 2 * 5 * 5 + 4 * 3 + 2 + 2),
    ("gpu-1", 4 + 2 + 2 + 2),
    ("nightly", 2 * 2 * 2 + 2 * 2 + 1),
])
def test_shipped_sweeps_validate(tmp_path, name, points):
    path = REPO / "sweeps" / f"{name}.toml"
    rc, stdout, _ = _harness("sweep", path, "--dry-run", "--out", tmp_path / "out")
    assert rc == 0
    assert f"valid, {points} points" in stdout
    assert not (tmp_path / "out").exists()


# --- failures are recorded and the sweep goes on ---------------------------------------------

FAILING = f"""
    name = "fails"
    steps = 2
    warmup = 1
    chip = "{CHIP}"
    [[grid]]
    workload = "collective"
    mesh = "8"
    [grid.set]
    kind = "all_gather"
    nbytes = [4096, 65536]
    [[grid]]
    workload = "matmul"
    mesh = ["3x3", "4x2"]      # 3x3 needs 9 devices: fails when it runs
    [grid.set]
    case = "no_comm"
    [[grid]]
    workload = "collective"
    mesh = "8"
    [grid.set]
    kind = "reduce_scatter"
    nbytes = 4100              # not a multiple of 4 bytes x 8 devices: fails at build
    """


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    d = tmp_path_factory.mktemp("failing")
    path = _write(d, FAILING)
    t0 = time.perf_counter()
    rc, stdout, stderr = _harness("sweep", path, "--out", d / "out")
    seconds = time.perf_counter() - t0
    (sweep_dir,) = (d / "out").iterdir()
    return path, sweep_dir, rc, stdout, stderr, seconds


def test_failing_points_recorded_and_rest_complete(failing):
    _, sweep_dir, rc, stdout, _, _ = failing
    assert rc == 1
    assert sweep_dir.name.startswith("fails-")
    manifest = json.loads((sweep_dir / sw.MANIFEST).read_text())
    recs = manifest["points"]
    assert [r["status"] for r in recs] == ["done", "done", "failed", "done", "failed"]
    assert [r["mesh"] for r in recs] == ["8", "8", "3x3", "4x2", "8"]
    assert "needs 9 devices" in recs[2]["error"] and "valid shapes" in recs[2]["error"]
    assert "multiple of 32" in recs[4]["error"]
    for r in recs:
        assert r["error"] is None or "\n" not in r["error"]
        if r["status"] == "failed":
            assert r["run"] is None
        else:
            run = Run.load(sweep_dir / r["run"])  # complete and readable
            assert run.meta["workload"] == r["workload"]
            assert run.meta["overrides"] == r["overrides"]
            # a missing mesh axis has size 1: mesh "8" for a 2-axis workload is 8x1
            assert run.meta["mesh"] == ({"X": 8, "Y": 1} if r["mesh"] == "8" else {"X": 4, "Y": 2})
    assert len(_complete_runs(sweep_dir)) == 3
    assert not _stray(sweep_dir)
    assert "failed: point 3" in stdout and "failed: point 5" in stdout
    assert stdout.strip().endswith(f"report: {sweep_dir / 'report.html'}")


def test_summary_table_in_a_log_is_one_line_per_point(failing):
    # stdout is no terminal here: each point is one line of its workload's table, whole
    stdout = failing[3]
    for point, status, settings in ((1, "done", "kind=all_gather nbytes=4096"),
                                    (2, "done", "kind=all_gather nbytes=65536"),
                                    (3, "failed", "case=no_comm"), (4, "done", "case=no_comm"),
                                    (5, "failed", "kind=reduce_scatter nbytes=4100")):
        (line,) = [x for x in stdout.splitlines() if x.startswith(f"│ {point} ")]
        assert settings in line and status in line
    assert "sweep fails: collective" in stdout and "sweep fails: matmul" in stdout


def test_summary_and_plots(failing):
    _, sweep_dir, *_ = failing
    df = pd.read_csv(sweep_dir / "summary.csv")
    assert list(df[schema.STATUS]) == ["done", "done", "failed", "done", "failed"]
    assert list(df[schema.POINT]) == [1, 2, 3, 4, 5]
    assert df.loc[2, schema.ERROR].startswith("WorkloadError: mesh 3x3 needs 9 devices")
    from predictions import collectives, hardware

    for i, nbytes in ((0, 4096), (1, 65536)):
        run = Run.load(sweep_dir / df.loc[i, schema.RUN])
        op = run.ops[run.ops[schema.OPCODE] == "all-gather"]
        assert len(op) == 1
        # an all-gather over 8 devices moves the 7 other shards into each device
        bus = nbytes * 7
        measured = bus / op[schema.MEASURED_S].iloc[0] / 1e9
        assert df.loc[i, schema.MEASURED_BUS_GBPS] == pytest.approx(measured, rel=1e-9)
        # the book: gathering V = 8 x nbytes over one axis of 8 devices on the chip
        t_book = collectives.estimate("all-gather", 8 * nbytes, (8,),
                                      hardware.chip_entry(CHIP)).seconds
        assert df.loc[i, schema.PREDICTED_BUS_GBPS] == pytest.approx(bus / t_book / 1e9, rel=1e-9)
        assert df.loc[i, schema.GROUP_SIZE] == 8
    assert df.loc[3, schema.MODEL_FLOPS] == 2 * 64 * 128 * 64  # the tiny preset's 2BDF
    assert df.loc[3, schema.MATMUL_EFFICIENCY] > 0
    for name in ("collective_bandwidth.png", "matmul_efficiency.png"):
        assert (sweep_dir / name).read_bytes().startswith(PNG_MAGIC)
    # Each point's page has its plots (by default): the matmul's three, the collective's step
    # (its one op has no FLOPs to place on a roofline, its one category no bars to compare);
    # the manifest keeps what drawing them took, a part of the point's time.
    matmul = sweep_dir / df.loc[3, schema.RUN]
    categories = len(Run.load(matmul).categories)  # bars only to compare two or more
    assert {p.name for p in matmul.glob("*.png")} == {"step.png", "roofline.png"} | (
        {"categories.png"} if categories > 1 else set())
    assert {p.name for p in (sweep_dir / df.loc[0, schema.RUN]).glob("*.png")} == {"step.png"}
    assert "data:image/png;base64," in (matmul / "report.html").read_text()
    done = [r for r in json.loads((sweep_dir / sw.MANIFEST).read_text())["points"]
            if r["status"] == "done"]
    assert all(0 < r["plot_seconds"] < r["seconds"] for r in done)
    html = (sweep_dir / "report.html").read_text()
    assert "collective_bandwidth.png" in html and "needs 9 devices" in html
    assert "point plots: " in html
    assert "| failed |" in (sweep_dir / "summary.md").read_text()


def test_resume_latest_skips_done_and_reruns_failed(failing):
    path, sweep_dir, *_ = failing
    before = _complete_runs(sweep_dir)
    rc, stdout, _ = _harness("sweep", path, "--out", sweep_dir.parent, "--resume")
    assert rc == 1  # the two failing points fail again
    assert "(2 run now, 3 already done)" in stdout
    assert _complete_runs(sweep_dir) == before
    rc, stdout, _ = _harness("sweep", path, "--out", sweep_dir.parent, "--resume", "--dry-run")
    assert rc == 0 and stdout.count(" failed ") >= 2


# --- a killed sweep resumes, every point stored once -------------------------------------------

TWO = f"""
    name = "two"
    steps = 2
    warmup = 1
    chip = "{CHIP}"
    [[grid]]
    workload = "collective"
    mesh = "8"
    [grid.set]
    nbytes = 4096
    [[grid]]
    workload = "matmul"        # big enough (about 2 s here) to be killed while it runs
    [grid.set]
    case = "no_comm"
    B = 2048
    D = 2048
    F = 2048
    """


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Wait until every thread of ``pid`` is stopped (Linux /proc; elsewhere a short pause)."""
    tasks = Path(f"/proc/{pid}/task")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0]
                      for t in tasks.iterdir()]
        except OSError:  # no /proc, or a thread just ended
            time.sleep(0.05)
            if not tasks.exists():
                return
            continue
        if all(st in "Tt" for st in states):
            return
        time.sleep(0.001)


def _interrupt_second_point(path: Path, out: Path, sig: int) -> tuple[Path, int, str]:
    """Run the sweep in a subprocess and send ``sig`` once point 1 is recorded and point 2 is
    being captured (its scratch directory exists). Returns (sweep dir, exit code, stderr)."""
    grid = load_sweep(path)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--out",
                             str(out)], cwd=path.parent, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            dirs = list(out.glob(f"{grid.name}-*")) if out.exists() else []
            if dirs and _stray(sw.point_dir(dirs[0], grid.points[1])):
                # Freeze the sweep and look again: on a loaded host the point may have finished
                # between the look and the signal. Frozen with its scratch in place, it is still
                # inside the point, so the signal lands there whatever the host's load.
                proc.send_signal(signal.SIGSTOP)
                _wait_stopped(proc.pid)
                still = _stray(sw.point_dir(dirs[0], grid.points[1]))
                if still:
                    proc.send_signal(sig)
                proc.send_signal(signal.SIGCONT)
                if still:
                    break
            time.sleep(0.01)
        else:
            pytest.fail(f"sweep ended (rc={proc.poll()}) or stalled before the signal: "
                        f"{proc.stderr.read().decode()[-2000:] if proc.poll() is not None else ''}")
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    (sweep_dir,) = out.iterdir()
    return sweep_dir, proc.returncode, stderr.decode()


def _manifest_statuses(sweep_dir: Path) -> list[str]:
    return [r["status"] for r in json.loads((sweep_dir / sw.MANIFEST).read_text())["points"]]


def test_killed_sweep_resumes_and_stores_each_point_once(tmp_path):
    path = _write(tmp_path, TWO)
    grid = load_sweep(path)
    sweep_dir, rc, _ = _interrupt_second_point(path, tmp_path / "out", signal.SIGKILL)
    assert rc == -signal.SIGKILL
    recs = json.loads((sweep_dir / sw.MANIFEST).read_text())["points"]
    assert [r["status"] for r in recs] == ["done", "pending"]
    first_run = recs[0]["run"]
    assert _complete_runs(sweep_dir) == [sweep_dir / first_run]
    assert _stray(sw.point_dir(sweep_dir, grid.points[1]))  # the kill left scratch, no run

    events = []
    result = sw.run_sweep(grid, sweep_dir, on_event=lambda e: events.append((e.kind, e.index)))
    assert events == [("skip", 0), ("start", 1), ("done", 1)]
    assert [r["status"] for r in result.records] == ["done", "done"]
    assert result.records[0]["run"] == first_run
    runs = _complete_runs(sweep_dir)
    assert runs == sorted(sweep_dir / r["run"] for r in result.records)
    assert [Run.load(r).meta["workload"] for r in runs] == ["collective", "matmul"]
    assert not _stray(sweep_dir)
    assert result.report.is_file()


def test_ctrl_c_stops_cleanly_and_resume_dir_finishes(tmp_path):
    path = _write(tmp_path, TWO)
    sweep_dir, rc, stderr = _interrupt_second_point(path, tmp_path / "out", signal.SIGINT)
    assert rc == 130
    assert f"--resume {sweep_dir}" in stderr
    # Sent while point 2 runs, the interrupt almost always stops it there (pending). Now and
    # then (2 full CI runs in 4 on a loaded host) it surfaced only after the point had finished
    # and been stored: then point 2 is done. Either way the manifest matches the runs on disk.
    statuses = _manifest_statuses(sweep_dir)
    assert statuses in (["done", "pending"], ["done", "done"])
    assert len(_complete_runs(sweep_dir)) == statuses.count("done")
    assert not _stray(sweep_dir)  # the interrupted point cleaned up after itself
    rc, stdout, _ = _harness("sweep", path, "--resume", sweep_dir)
    assert rc == 0
    pending = statuses.count("pending")
    assert f"({pending} run now, {2 - pending} already done)" in stdout
    assert _manifest_statuses(sweep_dir) == ["done", "done"]
    assert len(_complete_runs(sweep_dir)) == 2


def test_collective_over_two_axes_spelt_with_plus(tmp_path):
    # "X+Y" on a 4x2 mesh is one group of 8 devices. An all-reduce of b bytes moves
    # 2b(n-1)/n over each device's links (sharding.md's ring), 2 * 4096 * 7/8 = 7168 bytes.
    ops = pd.DataFrame({schema.CATEGORY: ["collective", "copy"], schema.MEASURED_S: [2e-5, 1e-5]})
    meta = {schema.CONFIG: {"kind": "all_reduce", "axes": "X+Y", "nbytes": 4096,
                            "dtype": "float32"},
            schema.MESH: {"X": 4, "Y": 2}}
    run = Run(path=tmp_path, meta=meta, ops=ops, summary={schema.ANALYTIC_S: 1e-5})
    row = sweep_report.workload_figures(run, workloads.get("collective"))
    assert row[schema.GROUP_SIZE] == 8 and row[schema.BUS_BYTES] == 7168
    assert row[schema.MEASURED_BUS_GBPS] == pytest.approx(7168 / 2e-5 / 1e9)
    assert row[schema.PREDICTED_BUS_GBPS] == pytest.approx(7168 / 1e-5 / 1e9)
    assert "over X+Y (8 devices)" in row[schema.SERIES]


def test_summary_flags_efficiency_and_mfu_beyond_the_roofline():
    from harness.analysis.gaps import ROOFLINE_MARGIN
    from harness.sweep import report as sweep_report

    rows = [{schema.POINT: 1, schema.WORKLOAD: "matmul", schema.OVERRIDES: "case=no_comm",
             schema.CHIP: "cpu", schema.STATUS: "done", schema.RUN: "",
             schema.EFFICIENCY: 1.44, schema.MFU: 2.86, schema.MATMUL_EFFICIENCY: 0.9,
             schema.HOST_SPEED: 0.73},
            {schema.POINT: 2, schema.WORKLOAD: "matmul", schema.OVERRIDES: "case=allgather",
             schema.CHIP: "cpu", schema.STATUS: "done", schema.RUN: "",
             schema.EFFICIENCY: ROOFLINE_MARGIN, schema.MFU: 0.5,  # at the margin: not flagged
             schema.MATMUL_EFFICIENCY: float("nan")}]
    df = pd.DataFrame(rows).reindex(columns=list(schema.SWEEP_SUMMARY))
    notes = sweep_report.impossible_notes(df)
    assert notes[0] == ("point 1 (matmul case=no_comm): efficiency 144%, mfu 286% "
                        "(host at 0.73x its calibrated speed)")
    assert notes[1].startswith("1 point(s) ran faster than the cpu roofline allows")
    assert "share the host's cores" in notes[1] and "calibration taken under load" in notes[1]
    assert len(notes) == 2
    # a book chip's numbers are its data sheet's: there, beating them means they are too low
    from harness.analysis.gaps import beats_roofline_reason
    assert beats_roofline_reason("tpu-v5e", "tpu").endswith("the chip's numbers are too low")
    assert "point 1 (matmul case=no_comm): efficiency 144%" in sweep_report.to_html({}, df, [])


def test_garbage_is_collected_between_points_only_when_memory_is_short(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    assert not sw.memory_short(meminfo=info)  # half available
    info.write_text("MemTotal:       16000000 kB\nMemAvailable:    3000000 kB\n")
    assert sw.memory_short(meminfo=info)      # 3/16 < 1/4
    assert sw.memory_short(meminfo=tmp_path / "absent")  # cannot tell: collect


def test_summary_row_carries_the_host_speed_a_cpu_run_was_scaled_by(tmp_path, monkeypatch):
    """A CPU run's drift factor (meta host_drift) is its row's host_speed; a run without one
    (an accelerator, or a chip named by hand) leaves it empty, and ``shown`` drops the column."""
    from harness.chip import drift

    ops = pd.DataFrame({schema.CATEGORY: ["matmul"], schema.MEASURED_S: [1e-3],
                        schema.PREDICTED_S: [1e-3], schema.EFFICIENCY: [1.0]})
    metas = {"cpu": {drift.HOST_DRIFT: {drift.REFERENCE: [9e9, 10e9], drift.FACTOR: 0.8}},
             "gpu": {}}
    monkeypatch.setattr(sweep_report.Run, "load",
                        classmethod(lambda cls, path: Run(path=path, meta=metas[path.name],
                                                          ops=ops)))
    record = {"index": 0, "workload": "other", "preset": "tiny", "mesh": "8", "overrides": {},
              "status": "done", "key": "k"}
    cpu = sweep_report.point_row(dict(record, run="cpu"), tmp_path)
    gpu = sweep_report.point_row(dict(record, run="gpu"), tmp_path)
    assert cpu[schema.HOST_SPEED] == 0.8 and gpu[schema.HOST_SPEED] is None
    df = pd.DataFrame([gpu]).reindex(columns=list(schema.SWEEP_SUMMARY))
    assert schema.HOST_SPEED not in sweep_report.shown(df).columns


def test_point_plots_are_drawn_by_default_and_their_time_kept_apart(tmp_path):
    from types import SimpleNamespace

    from harness.report import plots

    grid = load_sweep(_write(tmp_path, f"""
        name = "timed"
        chip = "{CHIP}"
        [[grid]]
        workload = "matmul"
        """))
    categories = pd.DataFrame({schema.CATEGORY: ["matmul", "copy"], schema.MEASURED_S: [2e-3, 1e-3],
                               schema.UNMODELED_S: [0.0, 0.0], schema.PREDICTED_S: [1e-3, 1e-3]})
    asked = []

    def runner(point, out, point_plots):  # stands in for a run: draws one plot when asked
        asked.append(point_plots)
        if point_plots:
            assert plots.category_bars(categories).startswith(PNG_MAGIC)
        run = out / "run"
        run.mkdir(parents=True)
        (run / store.META).write_text("{}")
        return SimpleNamespace(path=run)

    (drawn,) = sw.run_sweep(grid, tmp_path / "a", runner=runner, close=False).records
    (bare,) = sw.run_sweep(grid, tmp_path / "b", runner=runner, close=False,
                           point_plots=False).records
    assert asked == [True, False]
    assert 0 < drawn["plot_seconds"] <= drawn["seconds"] and bare["plot_seconds"] == 0
    assert sweep_report.timing([drawn]).startswith(f"point plots: {drawn['plot_seconds']:.1f} s")
    assert sweep_report.timing([bare]) == ""
