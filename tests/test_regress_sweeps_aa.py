"""Whole sweeps of the same code are not regressions (slow: four real quick sweeps, ~2-5 min).

Four ``harness sweep sweeps/quick.toml`` of one commit, the fourth beside a CPU-bound process,
compared pair by pair (all six) with the history under the sweeps' root and ``--confirm 3``, as a
nightly job compares them (``benchmarks/bench_sweep_aa.py``, which prints the figures): no pair
may be called a regression, so every comparison exits 0; points too noisy to judge are listed
apart as unstable, which exits 0 too. And one matmul point made 1.3x slower with the same program
(``trips`` 10 -> 13: a loop whose trip count is an input value), one run a side and no history,
is caught through its confirmations, both sides re-run interleaved (heavy: ``pytest -m heavy``).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


@pytest.mark.slow
def test_four_sweeps_of_one_commit_compare_without_a_regression(tmp_path):
    import bench_sweep_aa as aa

    results = aa.aa(tmp_path, aa.ROOT / "sweeps" / "quick.toml", confirm=3)
    assert [r["pair"] for r in results] == ["1-2", "2-3", "1-3", "3-4", "1-4", "2-4"]
    for r in results:
        assert (r["exit"], r["regressions"]) == (0, []), r
        assert sum(r["verdicts"].values()) == 22, r  # every point of the quick sweep paired


@pytest.mark.heavy  # not in CI: on a shared 2-core host a rerun lands in a 1.6x slow mode now
# and then (caught in 3 of 4 tries here; the fourth was unstable, never a wrong verdict)
def test_a_same_program_slowdown_is_confirmed_with_one_run_a_side(tmp_path):
    import bench_sweep_aa as aa

    code, obj = aa.slowdown(tmp_path, confirm=3)
    (pair,) = obj["pairs"]
    assert (code, pair["verdict"], pair["cause"]) == (1, "regression", "same program"), pair
    assert "the same program (fingerprint) did more work per step: 1.3x the FLOPs" in \
        pair["message"]
    assert pair["message"].startswith("confirmed by 3 rerun(s)"), pair["message"]
