"""``harness history``: the E-divisive statistic against its definition, no change point on flat
series (steady and bimodal), a 1.3x step at night 40 of 60 found within one night on series
drawn from real CPU runs (``benchmarks/bench_history_sim.py``, a few fixed seeds), the newest
night judged against the last stable segment, and the command over ten nights made from real
quick sweeps (``tests/fixtures/history``: one matmul 1.5x the FLOPs from night 6) and bad input.
"""
import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli, schema
from harness.record import Run
from harness.regress import changepoints, history, judge, trend
from harness.regress.figures import CPU

REPO = Path(__file__).resolve().parents[1]
NIGHTS = REPO / "tests" / "fixtures" / "history"
CHANGED = "matmul tiny B=4096 D=1024 F=1024 case=no_comm mesh 4x2"
sys.path.insert(0, str(REPO / "benchmarks"))


def test_the_statistic_is_the_energy_distance_of_its_definition():
    # x = 0,0,0 | 3,3,3: E|X-Y| = 3, within each side 0, so E = 2*3 = 6; Q = m n/(m+n) E
    x = np.array([0, 0, 0, 3, 3, 3], float)
    assert changepoints.best_split(x, np.ones(6)) == (3, pytest.approx(3 * 3 / 6 * 6))
    # weights 2 before, 1 after: the same E, the weight sums W_A = 6, W_B = 3: Q = 18/9 * 6
    w = np.array([2, 2, 2, 1, 1, 1], float)
    assert changepoints.best_split(x, w) == (3, pytest.approx(6 * 3 / 9 * 6))


def test_scores_match_a_direct_computation():
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=9), rng.uniform(0.5, 2, 9)
    for tau in range(3, 7):
        a, b, wa, wb = x[:tau], x[tau:], w[:tau], w[tau:]

        def mean(u, v, wu, wv):
            return float(np.sum(np.outer(wu, wv) * np.abs(u[:, None] - v[None, :]))
                         / (wu.sum() * wv.sum()))

        e = 2 * mean(a, b, wa, wb) - mean(a, a, wa, wa) - mean(b, b, wb, wb)
        q = wa.sum() * wb.sum() / w.sum() * e
        assert changepoints._scores(x, w, 3)[tau - 3] == pytest.approx(q)


@pytest.mark.parametrize("seed", range(4))
def test_no_change_point_on_a_flat_series(seed):
    rng = np.random.default_rng(seed)
    steady = rng.normal(0, 0.04, 60)
    # two modes, 2.2 ms and 4.6 ms, drawn at random each night: no change while both stay
    bimodal = np.log(np.where(rng.random(60) < 0.5, 2.2e-3, 4.6e-3)) + rng.normal(0, 0.03, 60)
    assert changepoints.e_divisive(steady) == []
    assert changepoints.e_divisive(bimodal) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_step_at_night_40_is_found_within_one_night(seed):
    import bench_history_sim as sim
    import bench_regress_sim

    runs = [r for r in json.loads(bench_regress_sim.DATA.read_text())
            if r.get(schema.STEP_CPU_TIMES_S) and r.get("cpu_rates")]
    rng = np.random.default_rng(seed)
    slow = sim.point_series(runs, "steady", 60, rng, 40, 1.3)
    (c,) = trend.change_points(slow, 60)  # exactly one, at the 40th night (index 39) +- 1
    assert abs(c.index - 39) <= 1 and c.change == pytest.approx(0.3, abs=0.08)
    assert trend.change_points(sim.point_series(runs, "steady", 60, rng), 60) == []


OPS = pd.DataFrame({schema.PROGRAM: ["p"], schema.OP: ["fusion"], schema.MEASURED_S: [1e-3],
                    schema.PREDICTED_S: [5e-4]})


def _series(steps: list[float]) -> history.Series:
    """One night per step time (10 steps at it, CPU time the same), commit c<i>."""
    nights = []
    for i, t in enumerate(steps):
        run = Run(meta={schema.TEST: "t", schema.STEP_TIMES_S: [t] * 10,
                        schema.STEP_CPU_TIMES_S: [t] * 10, schema.GIT_SHA: f"c{i:02d}",
                        schema.TIME: f"2026-11-{i + 1:02d}T03:00:00"}, ops=OPS)
        nights.append(history.night(f"n{i:02d}", [run], CPU))
    return history.series_of("t", nights, CPU)


def test_the_newest_night_is_judged_against_the_last_stable_segment():
    base = list(np.exp(np.random.default_rng(0).normal(np.log(1e-3), 0.01, 12)))
    flat = trend.judge_trend(_series(base + [1e-3]))
    assert flat.verdict == judge.OK and flat.changes == [] and flat.stable == (0, 12)
    slow = trend.judge_trend(_series(base + [1.5e-3]))  # 50% slower, s = 1%: beyond 10%
    # another commit, no fingerprints that differ: the same program, slower
    assert slow.verdict == judge.REGRESSION and slow.cause == judge.SAME_PROGRAM
    assert slow.change == pytest.approx(1.5e-3 / np.median(base) - 1)
    # after a step at night 7 (1.4x), the segment is nights 7..11: 1.4 ms again is ok
    stepped = base[:7] + [1.4 * x for x in base[7:]]
    t = trend.judge_trend(_series(stepped + [1.4e-3]))
    assert [c.index for c in t.changes] == [7] and t.stable == (7, 12)
    assert t.verdict == judge.OK
    assert t.changes[0].commits == "c06..c07"


def _harness(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:  # argparse's one line
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _commit(night: str) -> str:
    meta = next((NIGHTS / night).rglob("meta.json"))
    return json.loads(meta.read_text())[schema.GIT_SHA]


def test_history_of_ten_real_nights_finds_the_change_at_night_6(tmp_path):
    code, out, _ = _harness("history", NIGHTS, "--json", tmp_path / "h.json",
                            "--html", tmp_path / "h.html")
    obj = json.loads((tmp_path / "h.json").read_text())
    assert code == 0 and obj["verdict"] != judge.REGRESSION
    assert obj["nights"] == [f"night-{i:02d}" for i in range(1, 11)]
    changes = {p["key"]: p["changes"] for p in obj["points"]}
    (c,) = changes[CHANGED]
    assert c["night"] == "night-06" and c["cause"] == judge.PROGRAM
    assert c["commits"] == f"{_commit('night-05')[:12]}..{_commit('night-06')[:12]}"
    assert "1.5x the FLOPs" in c["what"]
    assert all(v == [] for k, v in changes.items() if k != CHANGED)
    assert c["commits"] in out and "newest night:" in out.splitlines()[-1]
    page = (tmp_path / "h.html").read_text()
    assert page.count("<img") == 3 and c["commits"] in page
    code, md, _ = _harness("history", NIGHTS, "--format", "md")
    assert code == 0 and md.startswith("**newest night:") and "### change points" in md
    assert f"| {CHANGED} | night-06 |" in md


def test_a_newest_night_that_regressed_exits_1(tmp_path):
    root = tmp_path / "nights"
    for i in range(1, 7):  # nights 1..6: the newest is the first slower one
        shutil.copytree(NIGHTS / f"night-{i:02d}", root / f"night-{i:02d}")
    code, out, _ = _harness("history", root, "--format", "json")
    obj = json.loads(out)
    point = next(p for p in obj["points"] if p["key"] == CHANGED)
    assert code == 1 and obj["verdict"] == judge.REGRESSION
    assert point["verdict"] == judge.REGRESSION and point["cause"] == judge.PROGRAM
    assert f"{_commit('night-05')[:12]}..{_commit('night-06')[:12]}" in point["message"]


@pytest.mark.parametrize("argv, said", [
    (["history", "no/such/dir"], "no/such/dir: no such directory of nights"),
    (["history", NIGHTS, "--json", "no/such/dir/h.json"], "--json no/such/dir/h.json"),
    (["history", NIGHTS, "--significance", "2"], "2 is not in (0, 1)"),
])
def test_bad_input_is_one_line_and_exit_2(argv, said):
    code, out, err = _harness(*argv)
    assert code == 2 and out == "" and said in err and len(err.strip().splitlines()) == 1


def _run(t: float, i: int) -> Run:
    return Run(meta={schema.TEST: "t", schema.STEP_TIMES_S: [t] * 10,
                     schema.STEP_CPU_TIMES_S: [t] * 10, schema.GIT_SHA: f"c{i:02d}",
                     schema.TIME: f"2026-11-{i + 1:02d}T04:00:00"}, ops=OPS)


def test_reruns_pool_into_the_newest_night():
    base = list(np.exp(np.random.default_rng(1).normal(np.log(1e-3), 0.01, 12)))
    t = trend.judge_trend(_series(base + [1.3e-3]))
    assert t.verdict == judge.REGRESSION
    # two reruns at the segment's level: the night's mean log is log(1.3) / 3, +9%: under 10%
    back = trend.with_newest_reruns(t, [_run(float(np.median(base)), 12)] * 2)
    assert back.verdict != judge.REGRESSION and back.message.startswith("not confirmed")
    assert len(back.series.nights[-1].runs) == 3
    assert back.change == pytest.approx(1.3e-3 ** (1 / 3) * np.median(base) ** (2 / 3)
                                        / np.median(base) - 1)
    held = trend.with_newest_reruns(t, [_run(1.3e-3, 12)] * 2)
    assert held.verdict == judge.REGRESSION and held.message.startswith("confirmed")
    # a pytest test's run is not rerun by history: said so, the verdict kept
    said = trend.confirm_newest(t, 2, Path("unused"), installed="c12")
    assert said.verdict == judge.REGRESSION and "not confirmed" in said.message
