"""Several hosts' traces of one profile, read as one job's (``harness.trace.hosts``): each
host's EVENTS as it reads alone, a host column, devices kept apart, read in worker processes
the same as in this one, and ``harness trace`` on the folder reporting per-host columns."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import schema
from harness.trace import parallel
from harness.trace.hosts import host_traces, read_hosts
from harness.trace.load import find_trace_file, read_events

H100 = Path(__file__).parent / "fixtures" / "h100"


@pytest.fixture()
def session(tmp_path) -> Path:
    """A profile session folder with two hosts' traces: the H100 matmul and llama fixtures
    (each host numbers its one GPU 0)."""
    folder = tmp_path / "plugins" / "profile" / "2026_11_25"
    folder.mkdir(parents=True)
    shutil.copy(find_trace_file(H100 / "llama_train-100m"), folder / "host-a.xplane.pb")
    shutil.copy(find_trace_file(H100 / "matmul-B4096-8192x8192-bf16"),
                folder / "host-b.xplane.pb")
    return tmp_path


def test_every_host_reads_as_it_reads_alone_apart_from_its_devices(session):
    paths = host_traces(session)
    assert [p.name for p in paths] == ["host-a.xplane.pb", "host-b.xplane.pb"]
    events, processes = read_hosts(paths)
    assert [p["host"] for p in processes] == ["host-a", "host-b"]
    assert [p["devices"] for p in processes] == [[0], [1]]  # both said GPU 0: kept apart
    for i, path in enumerate(paths):
        alone = read_events(path).events
        mine = events[events[schema.HOST] == i].reset_index(drop=True)
        assert len(mine) == len(alone)
        assert (mine[schema.OP].astype(str) == alone[schema.OP].astype(str)).all()
        assert (mine[schema.DURATION_NS] == alone[schema.DURATION_NS]).all()
        assert (mine[schema.DEVICE] == alone[schema.DEVICE] + i).all()


@pytest.mark.filterwarnings("ignore:os.fork")  # another test may have run jax here
def test_hosts_read_in_worker_processes_give_the_same_table(session, monkeypatch):
    if not parallel._can_fork():
        pytest.skip("no fork here: hosts are read in this process")
    serial, _ = read_hosts(host_traces(session))
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    pd.testing.assert_frame_equal(read_hosts(host_traces(session))[0], serial)


def test_harness_trace_on_a_profile_of_two_hosts_reports_each_hosts_time(session):
    from harness.runs.pipeline import analyze_trace

    run = analyze_trace(session, chip="h100", program="all")  # each host ran its own program
    assert run.meta[schema.DEVICE_COUNT] == 2 and len(run.meta["processes"]) == 2
    ops = run.ops.set_index(schema.OP)
    # llama's ops ran on host a only, the matmul's dot on both programs' hosts
    assert (ops[schema.HOSTS] == 1).all()
    assert set(ops[schema.SLOWEST_HOST]) == {0, 1}
    assert any("cross-host skew" in n for n in run.notes)
