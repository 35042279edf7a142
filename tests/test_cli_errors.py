"""Every bad input gives one line naming the file or field (and the valid choices), exit 2, no
traceback: a table of CLI cases, the ones fixed for issue 11 and the ones that already worked."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.capture.memory import MEMORY_ENV
from harness.cli import main
from harness.runs import scratch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A results directory with one good run and copies damaged in each way the issue lists."""
    root = tmp_path_factory.mktemp("results")
    assert main(["run", "matmul", "--steps", "1", "--warmup", "0", "--out", str(root)]) == 0
    good = next(p for p in root.iterdir() if p.is_dir())
    good = good.rename(root / "good")
    damage = {"list": [1, 2, 3], "null": None,
              "summary": dict(json.loads((good / "meta.json").read_text()), summary="oops"),
              "mesh": dict(json.loads((good / "meta.json").read_text()), mesh="4x2")}
    for name, meta in damage.items():
        shutil.copytree(good, root / f"bad-{name}")
        (root / f"bad-{name}" / "meta.json").write_text(json.dumps(meta))
    shutil.copytree(good, root / "bad-ops")
    pd.DataFrame({"a": [1], "b": ["x"]}).to_parquet(root / "bad-ops" / "ops.parquet")
    (root / "file").write_text("not a directory")
    (root / "latin1.toml").write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    (root / "bad.toml").write_text("name = \n")
    return root


# (argv with {root} for the results directory, strings the one line must contain)
CASES = [
    # meta.json that is JSON but not a run's, in report / compare
    (["report", "{root}/bad-list"], ["bad-list/meta.json", "JSON object", "[1, 2, 3]"]),
    (["report", "{root}/bad-null"], ["bad-null/meta.json", "JSON object", "null"]),
    (["report", "{root}/bad-summary"], ["bad-summary/meta.json", "'summary' must be an object"]),
    (["compare", "{root}/good", "{root}/bad-mesh"], ["bad-mesh/meta.json", "'mesh'"]),
    (["compare", "{root}/bad-null", "{root}/good"], ["bad-null/meta.json"]),
    # an ops table of the wrong schema
    (["report", "{root}/bad-ops"], ["bad-ops/ops.parquet", "missing program, op, measured_s"]),
    # output paths that cannot be used
    (["run", "matmul", "--out", "{root}/file"], ["--out", "is a file", "directory"]),
    (["calibrate", "--save", "{root}"], ["--save", "is a directory", "file path"]),
    (["calibrate", "--save", "{root}/no/such/cal.json"], ["is not a directory"]),
    # sweep files
    (["sweep", "{root}/latin1.toml"], ["latin1.toml:1", "not UTF-8"]),
    (["sweep", "{root}/bad.toml"], ["bad.toml", "line 1"]),
    # config fields
    (["run", "matmul", "--set", "B=-4"], ["MatmulConfig.B=-4", "must be >= 1"]),
    (["run", "matmul", "--set", "case=no_comm", "--set", "B=0"], ["B=0", ">= 1"]),
    (["run", "matmul", "--set", "nope=1"], ["no parameter 'nope'", "valid: B, D, F"]),
    (["run", "matmul", "--set", "case=diagonal"], ["matmul case", "valid:", "no_comm"]),
    (["run", "matmul", "--mesh", "3x3"], ["needs 9 devices", "valid shapes: 8, 1x8"]),
    (["run", "nope"], ["unknown workload 'nope'", "llama_train"]),
    (["run", "matmul", "--chip", "tpu-v9"], ["tpu-v9", "tpu-v5e"]),
    # argparse: one line, not the usage block
    (["run", "matmul", "--top", "-3"], ["--top", "-3 is negative", ">= 0"]),
    (["report", "{root}/good", "--top", "-3"], ["--top", ">= 0"]),
    (["run", "matmul", "--steps", "x"], ["--steps", "invalid int value: 'x'"]),
    (["run", "matmul", "--format", "pdf"], ["--format", "invalid choice", "md"]),
    (["frobnicate"], ["invalid choice: 'frobnicate'", "run"]),
    # launch names itself, not its argument list
    (["launch", "--"], ["launch needs a command", "run"]),
    (["launch", "--", "report", "x"], ["launch needs a command", "got report x"]),
    # stored runs that are not there
    (["report", "no-such-run", "--root", "{root}"], ["no-such-run", "no such run"]),
    (["trace", "{root}/no-such.xplane.pb"], ["no-such.xplane.pb"]),
    # a chip that is none, said before the trace is read (its path is not even looked at)
    (["trace", "{root}/no-such.xplane.pb", "--chip", "tpu-v9"], ["tpu-v9", "known chips"]),
    # and so before a run or trace is explained, or a script run
    (["explain", "{root}/no-such.xplane.pb", "--chip", "tpu-v9"], ["tpu-v9", "known chips"]),
    (["profile", "--chip", "tpu-v9", "{root}/no-such.py"], ["tpu-v9", "known chips"]),
    # a trace folder that already holds files, before the script runs
    (["profile", "--keep-trace", "{root}", "{root}/no-such.py"],
     ["--keep-trace", "not empty", "new or empty directory"]),
]


def _prog(argv: list[str]) -> str:
    return "harness " + argv[0] if argv[0] in ("run", "report", "compare", "calibrate", "sweep",
                                               "launch", "trace", "explain",
                                               "profile") else "harness"


@pytest.mark.parametrize("argv, expect", CASES, ids=[" ".join(a)[:50] for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(runs, capsys, argv, expect):
    argv = [a.replace("{root}", str(runs)) for a in argv]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse exits by itself
        rc = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (argv, out, err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{_prog(argv)}: error: "), lines[0]
    assert "Traceback" not in err and "usage:" not in err
    for s in expect:
        assert s in lines[0], (s, lines[0])
    assert not list(runs.glob(".*.tmp")) and not list(runs.glob(".tmp-*"))


def test_list_skips_a_damaged_run_with_a_warning_and_lists_the_rest(runs, capsys, caplog):
    assert main(["list", "--root", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "good" in out and "bad-" not in out
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("list", "null", "summary", "mesh", "ops"):
        assert f"bad-{name}" in warned


def test_out_of_memory_is_one_line(runs, capsys, monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "1KiB")
    assert main(["run", "matmul", "--out", str(runs / "oom")]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("harness run: error: matmul (tiny): the program needs ")
    assert "per device but a cpu has 1.00 KiB" in line and "--mesh" in line
    assert "--set B" in line and "remat" not in line  # matmul has B but no remat knob
    assert not [p for p in (runs / "oom").iterdir()]  # nothing stored, no scratch left


def test_a_sweep_records_an_oom_point_and_goes_on(tmp_path, monkeypatch, capsys):
    # 16 MiB per device. B=4096 D=2048 cannot fit: the allgather case gathers X[B, D] whole on
    # every device, 4096 * 2048 * 4 B = 32 MiB. B=256 fits: all of X, Y and Z together are
    # (256 * 2048 + 2048 * 256 + 256 * 256) * 4 B = 4.25 MiB.
    (tmp_path / "s.toml").write_text('name = "oomy"\nsteps = 1\nwarmup = 0\nchip = "h100"\n'
                                     '[[grid]]\nworkload = "matmul"\nmesh = "4x2"\n'
                                     '[grid.set]\nB = [4096, 256]\nD = [2048]\n')
    monkeypatch.setenv(MEMORY_ENV, "16MiB")
    assert main(["sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "out")]) == 1
    sweep_dir, = (tmp_path / "out").iterdir()
    points = json.loads((sweep_dir / "manifest.json").read_text())["points"]
    assert [p["status"] for p in points] == ["oom", "done"]
    assert "per device" in points[0]["error"] and "\n" not in points[0]["error"]
    assert "failed: point 1" in capsys.readouterr().out


def test_the_next_run_removes_a_killed_runs_scratch_but_not_a_live_ones(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".tmp-capture-p{dead.pid}-abc"
        busy = tmp_path / f".tmp-capture-p{live.pid}-def"
        for d in (stale, busy):
            (d / "trace").mkdir(parents=True)
        assert main(["run", "matmul", "--steps", "1", "--warmup", "0",
                     "--out", str(tmp_path)]) == 0
        assert not stale.exists() and busy.exists()
        assert scratch.clean_stale_scratch(tmp_path) == []
    finally:
        live.kill()
        live.wait()


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_no_compile_cache_leaves_the_cache_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_HARNESS_CACHE", str(tmp_path / "cache"))
    code = ("import sys; from harness.cli import main; sys.exit(main(['run', 'matmul', "
            f"'--steps', '1', '--warmup', '0', '--chip', 'h100', '--out', {str(tmp_path)!r}, "
            "'--no-compile-cache']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr[-500:]
    assert not (tmp_path / "cache" / "xla").exists()


# Output paths are checked before any work: a trace read, a program compiled, a script run.
# (argv with {root} for the results directory and {x} for the path under test, the option,
# "file" for a file it writes or "dir" for a directory it writes in)
H100_TRACE = "tests/fixtures/h100/llama_train-100m"
OUTPUTS = [
    (["trace", H100_TRACE, "--chip", "h100", "--csv", "{x}"], "--csv", "file"),
    (["trace", H100_TRACE, "--chip", "h100", "--json", "{x}"], "--json", "file"),
    (["trace", H100_TRACE, "--chip", "h100", "--html", "{x}"], "--html", "file"),
    (["explain", H100_TRACE, "--csv", "{x}"], "--csv", "file"),
    (["explain", H100_TRACE, "--json", "{x}"], "--json", "file"),
    (["compare", "{root}/good", "{root}/good", "--json", "{x}"], "--json", "file"),
    (["compare", "{root}/good", "{root}/good", "--junit", "{x}"], "--junit", "file"),
    (["calibrate", "--quick", "--save", "{x}"], "--save", "file"),
    (["profile", "--out", "{x}", "{script}"], "--out", "dir"),
    (["profile", "--keep-trace", "{x}", "{script}"], "--keep-trace", "dir"),
    (["run", "matmul", "--steps", "1", "--warmup", "0", "--out", "{x}"], "--out", "dir"),
    (["sweep", "{sweep}", "--out", "{x}"], "--out", "dir"),
]
# bad paths of each kind: (name, path under tmp_path, what the line says); "afile" is a regular
# file, so nothing can be made below it, by root either (tests may run as root, whom chmod does
# not stop)
BAD = {
    "file": [("missing-dir", "no/such/out.txt", "no/such is not a directory (it does not exist)"),
             ("a-dir", ".", "is a directory"),
             ("under-a-file", "afile/out.txt", "afile is not a directory (it is a file)")],
    "dir": [("a-file", "afile", "is a file"),
            ("under-a-file", "afile/sub/dir", "afile is a file, not a directory")],
}
# a folder that takes no new files, whatever os.access says (it says yes to root): Linux's /proc
if Path("/proc/self").is_dir():
    BAD["file"].append(("in-proc", "/proc/out.txt", "cannot write in /proc"))
    BAD["dir"].append(("in-proc", "/proc/out", "cannot write in /proc"))
OUTPUT_CASES = [(argv, option, name, rel, says) for argv, option, kind in OUTPUTS
                for name, rel, says in BAD[kind]]


@pytest.mark.parametrize("argv, option, name, rel, says", OUTPUT_CASES,
                         ids=[f"{a[0]} {o} {n}" for a, o, n, _, _ in OUTPUT_CASES])
def test_an_unwritable_output_is_one_line_before_any_work(runs, tmp_path, capsys, argv, option,
                                                          name, rel, says):
    (tmp_path / "afile").write_text("a regular file")
    # the script would leave a mark if it ran
    script = tmp_path / "mine.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\nprint('hello')\n")
    (tmp_path / "s.toml").write_text('name = "s"\nsteps = 1\nwarmup = 0\n'
                                     '[[grid]]\nworkload = "matmul"\n')
    x = tmp_path if rel == "." else tmp_path / rel
    subs = {"{root}": str(runs), "{x}": str(x), "{script}": str(script),
            "{sweep}": str(tmp_path / "s.toml")}
    argv = [subs.get(a, a).replace("{root}", str(runs)) for a in argv]
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (argv, out, err)
    assert out == "", out  # nothing printed before the error: no report, no table
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"harness {argv[0]}: error: {option} {x}: "), lines[0]
    assert says in lines[0], (says, lines[0])
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made, nothing ran


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only directory")
def test_an_output_in_a_read_only_directory_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        rc = main(["trace", H100_TRACE, "--chip", "h100", "--csv", str(locked / "ops.csv")])
    finally:
        locked.chmod(0o755)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == (f"harness trace: error: --csv {locked / 'ops.csv'}: cannot write in "
                           f"{locked} (permission denied)")


def test_a_writable_output_path_passes_and_is_written(tmp_path, capsys):
    # the directory exists, the file does not yet: the check lets it through, the command writes
    out = tmp_path / "ops.csv"
    assert main(["trace", H100_TRACE, "--chip", "h100", "--top", "1", "--csv", str(out)]) == 0
    assert "jit_train_step" in capsys.readouterr().out
    header, *rows = out.read_text().splitlines()
    assert header.startswith("program,op,") and len(rows) > 1  # the full table, not --top 1
