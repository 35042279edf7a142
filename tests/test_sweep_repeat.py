"""``harness sweep --repeat N``: each point N times, interleaved, each run marked with its repeat
index (schema.REPEAT), resumable; the fresh process itself stood in for (no workload runs)."""
import json
import textwrap
from types import SimpleNamespace

import pytest

from harness import schema
from harness.errors import HarnessError
from harness.record import store
from harness.sweep import repeat as repeat_runs
from harness.sweep import run as sw
from harness.sweep.grid import load_sweep


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent("""
        name = "rep"
        chip = "tpu-v5e"
        [[grid]]
        workload = "matmul"
        mesh = ["8", "4x2"]
        """).lstrip("\n"))
    return load_sweep(path)


@pytest.fixture
def ran(monkeypatch):
    """Stands in for a fresh process: stores a run marked with its repeat index."""
    seen = []

    def fresh(point, out, point_plots, index):
        seen.append((point.mesh, index))
        run = out / f"run-{index}"
        run.mkdir(parents=True)
        (run / store.META).write_text("{}")
        repeat_runs.mark(run, index)
        return SimpleNamespace(path=run)

    monkeypatch.setattr(repeat_runs, "fresh", fresh)
    return seen


def test_repeats_are_interleaved_and_marked(grid, ran, tmp_path):
    result = sw.run_sweep(grid, tmp_path / "sw", repeat=3, close=False)
    # every point once, then every point again: a passing load falls on several points
    assert ran == [("8", 0), ("4x2", 0), ("8", 1), ("4x2", 1), ("8", 2), ("4x2", 2)]
    for point in grid.points:
        runs = sorted(sw.point_dir(tmp_path / "sw", point).iterdir())
        assert [json.loads((r / store.META).read_text())[schema.REPEAT] for r in runs] == \
            [0, 1, 2]
    assert all(r["status"] == sw.DONE for r in result.records)


def test_a_resumed_sweep_runs_only_the_missing_repeats(grid, ran, tmp_path):
    sw.run_sweep(grid, tmp_path / "sw", repeat=2, close=False)
    ran.clear()
    sw.run_sweep(grid, tmp_path / "sw", repeat=3, close=False)
    assert ran == [("8", 2), ("4x2", 2)]


def test_repeats_do_not_run_across_a_job(grid, tmp_path):
    with pytest.raises(HarnessError, match="fresh process"):
        sw.run_sweep(grid, tmp_path / "sw", repeat=2, runner=lambda *a: None)
