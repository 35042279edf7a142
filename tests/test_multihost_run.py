"""Multi-host runs: ``harness launch`` starts 2 processes x 4 virtual CPU devices on 127.0.0.1
(jax.distributed, gloo collectives); process 0 merges the per-op tables into one run.

The processes are real subprocesses (``python -m harness``); the single-process references run in
this test process, which has 8 virtual devices (conftest).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli, schema
from harness.measure.per_host import BY_DEVICE_CSV, by_device, host_columns
from harness.multihost.xspace import MERGED_DIR, MERGED_FILE, write_merged
from harness.record import Run, store
from harness.trace.load import load_events

HARNESS = [sys.executable, "-m", "harness"]
STEPS = ["--steps", "2", "--warmup", "1", "--chip", "cpu"]


def _env(tmp_path: Path) -> dict:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(scratch), JAX_PLATFORMS="cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, *command: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, "launch", "--processes", "2", "--devices-per-process", "4",
                           "--", *command], capture_output=True, text=True, timeout=timeout,
                          env=_env(tmp_path), check=False)


def _only_run(out: Path) -> Path:
    entries = sorted(out.iterdir())
    assert [e.name for e in entries if e.name.startswith(store.TMP_PREFIX)] == []
    assert len(entries) == 1, [e.name for e in entries]
    return entries[0]


# --- acceptance: 2 processes x 4 devices, one merged run ------------------------------------
@pytest.mark.parametrize("workload", ["collective", "llama_train"])
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_two_processes_merge_into_one_run_with_all_devices(tmp_path, workload):
    from harness.runs.workload import run_workload

    out = tmp_path / "results"
    # `harness run ... --distributed` after `--`, as docs/commands.md spells it
    done = _launch(tmp_path, "harness", "run", workload, "--distributed", "--out", str(out),
                   *STEPS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"[p0] {workload} (tiny) on mesh" in done.stdout
    run = Run.load(_only_run(out))
    assert (f"[p1] process 1 of 2: per-op tables sent; process 0 stored the run in {run.path}"
            in done.stdout)
    assert list((tmp_path / "tmp").iterdir()) == []  # launch's scratch space is gone

    assert run.meta["process_count"] == 2 and run.meta["device_count"] == 8
    hosts = {p["process"]: p["devices"] for p in run.meta["processes"]}
    assert sorted(hosts) == [0, 1] and all(len(d) == 4 for d in hosts.values())
    ops = run.ops
    assert (ops[schema.DEVICES] == 8).all() and (ops[schema.HOSTS] == 2).all()

    per_device = pd.read_csv(run.path / BY_DEVICE_CSV)
    for (_, op), g in per_device.groupby([schema.PROGRAM, schema.OP]):
        assert sorted(g[schema.DEVICE]) == sorted(hosts[0] + hosts[1]), op
        for h, devices in hosts.items():
            assert sorted(g.loc[g[schema.HOST] == h, schema.DEVICE]) == sorted(devices), op
    # Per op: measured_s is the median over all 8 devices of each device's time, and the host
    # columns the min/max over hosts of the median over that host's 4 devices.
    # A collective's host columns count from its group's last arrival (its wait left out:
    # harness.measure.per_host.from_last_arrival), so they are at most its whole times'.
    row = ops.set_index(schema.OP)
    for op, g in per_device.groupby(schema.OP):
        assert row.at[op, schema.MEASURED_S] == pytest.approx(np.median(g[schema.MEASURED_S]))
        host_medians = g.groupby(schema.HOST)[schema.MEASURED_S].median()
        if row.at[op, schema.CATEGORY] == schema.CAT_COLLECTIVE:
            assert 0 <= row.at[op, schema.HOST_MIN_S] <= row.at[op, schema.HOST_MAX_S] \
                <= host_medians.max() * (1 + 1e-9)
            continue
        assert row.at[op, schema.HOST_MIN_S] == pytest.approx(host_medians.min())
        assert row.at[op, schema.HOST_MAX_S] == pytest.approx(host_medians.max())
        assert row.at[op, schema.HOST_SKEW_S] == pytest.approx(host_medians.max() -
                                                               host_medians.min())
        # the slowest host: one whose median is the max (two hosts within float rounding of
        # each other, as a 2 us op's can be, are both the slowest)
        assert host_medians[row.at[op, schema.SLOWEST_HOST]] == pytest.approx(host_medians.max())
    assert any("cross-host skew" in n for n in run.notes)
    assert run.meta[schema.OP_TIMING] == "device_median"  # hosts' clocks differ: no shares
    assert (run.path / "report.html").exists() and (run.path / "report.md").exists()
    # the merged trace holds both hosts' devices and each op's executions on all 8
    merged = load_events(run.path / "trace" / MERGED_DIR / MERGED_FILE)
    assert sorted(merged[schema.DEVICE].unique()) == sorted(hosts[0] + hosts[1])
    ran = merged[merged[schema.OP].isin(per_device[schema.OP])]
    assert (ran.groupby(schema.OP, observed=True)[schema.DEVICE].nunique() == 8).all()

    single = run_workload(workload, out=tmp_path / "single", steps=2, warmup=1, chip="cpu")
    assert set(ops[schema.OP]) == set(single.ops[schema.OP])
    if workload == "collective":
        assert ops[schema.OPCODE].tolist() == ["all-gather"]


# --- a sweep across the job: every point stored once, resumable ------------------------------
SWEEP = """name = "job"
description = "a sweep across two processes: one good point, one mesh the job cannot hold"
steps = 2
warmup = 1
chip = "cpu"
[[grid]]
workload = "collective"
mesh = ["8", "3x3"]
[grid.set]
kind = ["all_gather", "all_reduce"]
nbytes = [4096]
"""


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_sweep_across_two_processes_stores_every_point_once(tmp_path):
    sweep_file = tmp_path / "job.toml"
    sweep_file.write_text(SWEEP)
    out = tmp_path / "sweeps"
    done = _launch(tmp_path, "sweep", str(sweep_file), "--out", str(out), timeout=300)
    # 2 kinds x 2 meshes: the 3x3 mesh needs 9 devices of the job's 8, so 2 points fail
    assert done.returncode == 1, done.stderr[-3000:]
    assert "[p1] process 1 of 2: ran 4 point(s) with process 0, which stored 2" in done.stdout
    (sweep_dir,) = list(out.iterdir())
    runs = sorted(p.parent for p in sweep_dir.rglob(store.META))
    assert len(runs) == 2  # one run per good point, stored once, by process 0
    for path in runs:
        run = Run.load(path)
        assert run.meta["process_count"] == 2 and run.meta["device_count"] == 8
        assert sorted(p["process"] for p in run.meta["processes"]) == [0, 1]
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert sorted(r["status"] for r in manifest["points"]) == ["done", "done", "failed",
                                                                "failed"]
    again = _launch(tmp_path, "sweep", str(sweep_file), "--out", str(out), "--resume", timeout=300)
    assert "2 of 4 points done, 2 failed (2 run now, 2 already done)" in again.stdout
    assert sorted(p.parent for p in sweep_dir.rglob(store.META)) == runs  # nothing re-run


# --- a process killed mid-run ---------------------------------------------------------------
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_killing_a_process_stops_the_launch_and_leaves_no_run(tmp_path):
    out = tmp_path / "results"
    cmd = [*HARNESS, "launch", "--processes", "2", "--devices-per-process", "4", "--", "-v",
           "run", "collective", "--out", str(out), "--steps", "1000000", "--warmup", "0",
           "--chip", "cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(tmp_path))
    lines, tracing = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[p1]") and "tracing" in line:
                tracing.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert tracing.wait(120), "".join(lines[-30:])
        pid = int(re.search(r"started p1 \(pid (\d+)\)", "".join(lines)).group(1))
        time.sleep(0.5)  # mid-run: steps are being traced
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    assert rc == 128 + signal.SIGKILL
    assert time.monotonic() - t0 < 30
    last = lines[-1].strip()
    assert last.startswith("harness launch: process 1 (pid ") and "killed by SIGKILL" in last
    assert not out.exists() or list(out.iterdir()) == []
    assert list((tmp_path / "tmp").iterdir()) == []


# --- initialization fails fast and says why ---------------------------------------------------
def _run_distributed(tmp_path, port, process_id, num_processes, timeout="2"):
    return subprocess.Popen(
        [*HARNESS, "--devices", "4", "run", "collective", "--out", str(tmp_path / "results"),
         "--chip", "cpu", "--distributed", "--coordinator", f"127.0.0.1:{port}",
         "--num-processes", str(num_processes), "--process-id", str(process_id),
         "--init-timeout", timeout],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_wrong_coordinator_or_process_count_fails_in_bounded_time(tmp_path):
    no_coordinator, missing_peer, pair = _free_port(), _free_port(), _free_port()
    t0 = time.monotonic()
    cases = {
        # nothing listens at the address process 1 was given
        "address": _run_distributed(tmp_path, no_coordinator, 1, 2),
        # process 0 of 2, but the second process never starts
        "count": _run_distributed(tmp_path, missing_peer, 0, 2),
        # process 1 believes in 3 processes; process 0 started a job of 2
        "mismatch0": _run_distributed(tmp_path, pair, 0, 2, timeout="60"),
        "mismatch1": _run_distributed(tmp_path, pair, 1, 3, timeout="60"),
    }
    results = {}
    try:
        for name in ("address", "count", "mismatch1"):
            _, err = cases[name].communicate(timeout=60)
            results[name] = (cases[name].returncode, err.strip().splitlines()[-1],
                             time.monotonic() - t0)
    finally:
        for p in cases.values():
            if p.poll() is None:
                p.kill()  # process 0 of the mismatched pair waits for its missing peer
                p.communicate()
    rc, line, elapsed = results["address"]
    assert rc == 2 and elapsed < 40
    assert line == (f"harness run: error: process 1 of 2: no JAX coordinator answered at "
                    f"127.0.0.1:{no_coordinator} within 2 s (Connection refused); start process 0 "
                    f"with the same --coordinator, or fix the address")
    rc, line, elapsed = results["count"]
    assert rc == 2 and elapsed < 40
    assert line.startswith(f"harness run: error: process 0 of 2: the coordinator at 127.0.0.1:"
                           f"{missing_peer} did not see all 2 processes within 2 s")
    rc, line, _ = results["mismatch1"]
    assert rc == 2
    assert line == (f"harness run: error: process 1: --num-processes 3, but the coordinator at "
                    f"127.0.0.1:{pair} runs a job of 2 processes")


@pytest.mark.parametrize("argv, message", [
    (["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"],
     "--coordinator 'localhost' is not HOST:PORT"),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"],
     "--process-id 2 is not valid for --num-processes 2; valid: 0..1"),
    (["--num-processes", "2"], "give all of --coordinator, --num-processes and --process-id"),
])
def test_bad_distributed_options_are_rejected_before_joining(argv, message, capsys):
    assert cli.main(["run", "collective", "--distributed", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command, message", [
    ([], "launch needs a command that takes --distributed"),
    (["--", "predict", "step"], "launch needs a command that takes --distributed"),
    (["--", "run", "collective", "--process-id", "1"], "launch sets --coordinator"),
    (["--", "harness", "run", "collective", "--devices=8"], "remove --devices=8"),
])
def test_launch_rejects_commands_it_cannot_run(command, message, capsys):
    assert cli.main(["launch", *command]) == 2
    assert message in capsys.readouterr().err


# --- merging, from hand-made tables --------------------------------------------------------------
def _events() -> pd.DataFrame:
    """2 hosts x 2 devices, 2 programs, 3 steps; op "ag" takes (host+1) * (device+1) us."""
    rows = []
    for host, devices in ((0, (0, 1)), (1, (4096, 4097))):
        for d_i, device in enumerate(devices):
            for step in range(3):
                t = 1_000_000 * step + 1000 * host
                dur = 1000 * (host + 1) * (d_i + 1)
                rows.append(("jit_a", "ag", device, step, t, dur, host))
                rows.append(("jit_a", "fusion.1", device, step, t + dur, 10, host))
                rows.append(("jit_b", "fusion.1", device, step, t + 50_000, 20, host))
    cols = [*schema.EVENTS, schema.HOST]
    return pd.DataFrame(rows, columns=cols).astype({schema.PROGRAM: "category",
                                                    schema.OP: "category"})


def test_host_columns_and_per_device_table():
    events = _events()
    hosts = host_columns(events).set_index([schema.PROGRAM, schema.OP])
    ag = hosts.loc[("jit_a", "ag")]
    # host 0: devices take 1 and 2 us -> median 1.5 us; host 1: 2 and 4 us -> 3 us
    assert ag[schema.HOST_MIN_S] == pytest.approx(1.5e-6)
    assert ag[schema.HOST_MAX_S] == pytest.approx(3e-6)
    assert ag[schema.HOST_SKEW_S] == pytest.approx(1.5e-6)
    assert ag[schema.SLOWEST_HOST] == 1 and ag[schema.HOSTS] == 2
    assert hosts.loc[("jit_b", "fusion.1"), schema.HOST_SKEW_S] == 0
    table = by_device(events)
    assert list(table.columns) == list(schema.OPS_BY_DEVICE)
    ag_rows = table[table[schema.OP] == "ag"].set_index(schema.DEVICE)[schema.MEASURED_S]
    assert ag_rows.to_dict() == pytest.approx({0: 1e-6, 1: 2e-6, 4096: 2e-6, 4097: 4e-6})


def test_merged_trace_holds_every_hosts_op_executions(tmp_path, capsys):
    events = _events()
    processes = [{"process": 0, "host": "node-a"}, {"process": 1, "host": "node-b"}]
    path = write_merged(tmp_path, events, processes)
    assert path == tmp_path / "trace" / "merged" / "all-processes.xplane.pb"
    back = load_events(path)  # harness trace's reader, in the CPU format
    key = [schema.PROGRAM, schema.OP, schema.DEVICE, schema.START_NS, schema.DURATION_NS]
    want = events[key].astype({schema.PROGRAM: str, schema.OP: str})
    got = back[key].astype({schema.PROGRAM: str, schema.OP: str})
    assert sorted(map(tuple, got.values.tolist())) == sorted(map(tuple, want.values.tolist()))
    from harness.trace.xplane import XSpace

    space = XSpace.FromString(path.read_bytes())
    assert list(space.hostnames) == ["node-a", "node-b"]
    lines = sorted(line.name for line in space.planes[0].lines)
    assert lines[0] == "tf_XLA p0 node-a device 0" and lines[-1] == "tf_XLA p1 node-b device 4097"
    assert cli.main(["trace", str(path)]) == 0
    assert "ag" in capsys.readouterr().out
