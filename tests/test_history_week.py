"""``harness history`` over a week (issue 57, part 4): a change of code found in a few nights by
the verdict's own test on the nights either side of it (``harness.regress.code_changes``), the
newest night's cause read against the last night of another code, and the changed nights kept
out of the stable segment. Hand-made nights with known values (expected by arithmetic)."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from harness import cli, schema
from harness.record import Run
from harness.regress import code_changes, history, judge, trend
from harness.regress.figures import CPU

OLD, NEW = "a762cc0" + "1" * 33, "b28f9f7" + "2" * 33  # the commits of nights 1-4 and 5-7
# two points of a matmul sweep: (key, CPU time per step of nights 1-4 in s); nights 5-7 at 2x
POINTS = (("matmul B=256", (0.10, 0.12, 0.11, 0.10)), ("matmul B=512", (0.11, 0.10, 0.12, 0.11)))


def _run(key: str, i: int, t: float, commit: str, flops: float) -> Run:
    """Night ``i``'s run (1-based) of point ``key``: 10 steps at ``t`` s (wall and CPU time), the
    program of ``commit`` (its fingerprint and FLOPs per device)."""
    ops = pd.DataFrame({schema.PROGRAM: ["jit_mm"], schema.OP: ["dot"], schema.COUNT: [1.0],
                        schema.MEASURED_S: [t], schema.PREDICTED_S: [t / 2],
                        schema.FLOPS: [flops]})
    return Run(meta={schema.TEST: key, schema.STEP_TIMES_S: [t] * 10,
                     schema.STEP_CPU_TIMES_S: [t] * 10, schema.GIT_SHA: commit,
                     schema.HLO_FINGERPRINTS: {"jit_mm": commit[:4]},
                     schema.TIME: f"2026-11-{i:02d}T03:00:00"},
               ops=ops, summary={schema.HLO_FLOPS_PER_DEVICE: flops})


def _week(key: str, before, nights: int = 7, at: int = 5) -> history.Series:
    """``nights`` nights of ``key``: ``before`` (cycled) until night ``at`` - 1, then 0.20 s
    (2x the work of the new commit, 1e9 -> 2e9 FLOPs) from night ``at``."""
    out = []
    for i in range(1, nights + 1):
        new = i >= at
        t = 0.20 + 0.002 * (i % 2) if new else before[(i - 1) % len(before)]
        run = _run(key, i, t, NEW if new else OLD, 2e9 if new else 1e9)
        out.append(history.night(f"night-{i}", [run], CPU))
    return history.series_of(key, out, CPU)


@pytest.mark.parametrize("key, before", POINTS)
def test_a_2x_code_regression_from_night_5_is_found_at_night_5(key, before):
    t = trend.judge_trend(_week(key, before))
    (c,) = t.changes
    # night 5 is index 4; its commit range: night 4's commit..night 5's
    assert (c.index, c.after.name, c.cause) == (4, "night-5", judge.PROGRAM)
    assert c.commits == f"{OLD[:12]}..{NEW[:12]}"
    assert "2x the FLOPs" in c.what and "fingerprint" not in c.what
    # the medians: 0.20-0.202 s against 0.10-0.12 s, +70% to +100%
    assert 0.6 < c.change < 1.05
    # the new normal is nights 5-6: the newest (night 7, 0.202 s) is ok against them
    assert t.stable == (4, 6) and t.verdict == judge.OK


def test_the_verdicts_test_reaches_where_seven_nights_of_permutations_cannot():
    """Nights 1-4 at log 0.10-0.12 s, 5-7 at log 0.20-0.202 s: the difference of the means is
    log(0.2013 / 0.1071) = 0.63 (their geometric means), the pooled SD ~0.07 over 5 degrees of
    freedom: t ~ 12, where 35 distinct splits give a permutation test p >= 2/35 = 0.057."""
    key, before = POINTS[0]
    s = _week(key, before)
    a, b = s.values[:4], s.values[4:]
    r, se, df = code_changes.weigh(a, b, 0.0)
    assert r == pytest.approx(np.mean(np.log([0.202, 0.20, 0.202])) - np.mean(np.log(before)))
    assert df == 5 and r / se > 10
    (c,) = code_changes.at_code_changes(s.values, [n.commit for n in s.nights])
    assert c.index == 4 and c.p_value < 1e-4


def test_the_newest_night_of_a_new_commit_is_judged_against_nights_1_to_4():
    key, before = POINTS[0]
    t = trend.judge_trend(_week(key, before, nights=5))  # night 5 the newest: no nights after
    assert t.changes == [] and t.stable == (0, 4)
    assert (t.verdict, t.cause) == (judge.REGRESSION, judge.PROGRAM)
    # the segment's median of the logs: the middle two, log 0.10 and log 0.11
    assert t.change == pytest.approx(0.202 / math.sqrt(0.10 * 0.11) - 1)
    assert f"commits {OLD[:12]}..{NEW[:12]}" in t.message and "2x the FLOPs" in t.message


def test_six_nights_still_flag_the_change_until_three_nights_place_it():
    """Two nights of the new commit: no change point yet (3 nights a side), but night 5 stays
    out of the stable segment, so the newest (night 6, 0.20 s) is still a regression against
    nights 1-4, read where the code changed."""
    key, before = POINTS[1]
    t = trend.judge_trend(_week(key, before, nights=6))
    assert t.changes == [] and t.stable == (0, 4)
    assert (t.verdict, t.cause) == (judge.REGRESSION, judge.PROGRAM)
    assert t.change == pytest.approx(0.20 / 0.11 - 1)  # the middle two: 0.11 and 0.11
    assert f"commits {OLD[:12]}..{NEW[:12]}" in t.message
    assert "nights night-5 to night-6 ran its code" in t.message


def test_the_newest_nights_cause_is_read_where_the_code_changed():
    """Nights 1-5 of commit A at 100 ms, nights 6-8 of commit B (the same program) at 100, 100
    and 130 ms: nights 6-8's mean is +9%, under the 10% threshold, so no change point; the
    newest (130 ms) is judged against nights 1-5, the last night of another commit being night
    5, and its cause is that commit range, not "the host" (nights 7 and 8 ran one commit)."""
    key, a, b = "t", "a" * 40, "b" * 40
    nights = [history.night(f"night-{i}", [_run(key, i, t, c, 1e9)], CPU) for i, (t, c) in
              enumerate([(0.1, a)] * 5 + [(0.1, b), (0.1, b), (0.13, b)], 1)]
    for n in nights:  # one program throughout
        n.runs[0].meta[schema.HLO_FINGERPRINTS] = {"jit_mm": "same"}
    t = trend.judge_trend(history.series_of(key, nights, CPU))
    assert t.changes == [] and t.stable == (0, 5)  # nights 6 and 7 kept out
    assert (t.verdict, t.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    assert t.change == pytest.approx(0.3)
    assert f"commits {a[:12]}..{b[:12]}" in t.message
    assert "nights night-6 to night-8 ran its code" in t.message


@pytest.mark.parametrize("nights", range(5, 11))
@pytest.mark.parametrize("seed", range(3))
def test_a_flat_week_with_a_commit_each_night_has_no_change_point(nights, seed):
    """Noise of sd 0.04 in the log (the CPU time per step between runs on the 2-core host),
    a new commit every night: every change of code is tested, none stands."""
    rng = np.random.default_rng(seed)
    runs = [_run("t", i, float(0.1 * math.exp(rng.normal(0, 0.04))), f"{i:040x}", 1e9)
            for i in range(1, nights + 1)]
    s = history.series_of("t", [history.night(f"n{i}", [r], CPU)
                                for i, r in enumerate(runs, 1)], CPU)
    assert trend.change_points(s, nights) == []


def test_the_command_names_the_change_for_every_point(tmp_path):
    root = tmp_path / "nights"
    for key, before in POINTS:
        for n in _week(key, before).nights:
            n.runs[0].save(root / n.name / key.replace(" ", "_").replace("=", ""))
    code = cli.main(["history", str(root), "--json", str(tmp_path / "h.json"), "--format", "md"])
    obj = json.loads((tmp_path / "h.json").read_text())
    assert code == 0 and obj["changes"] == len(POINTS)
    for p in obj["points"]:
        (c,) = p["changes"]
        assert (c["night"], c["cause"], c["commits"]) == ("night-5", judge.PROGRAM,
                                                          f"{OLD[:12]}..{NEW[:12]}")
