"""Confirm before failing (harness.regress.confirm): a workload run that looks slower is re-run
before its verdict; the fresh process itself stood in for with hand-made runs."""
import math

import numpy as np
import pytest
from test_regress_judge import make

from harness import schema
from harness.regress import confirm, judge, noise
from harness.sweep import repeat as repeat_runs

SHA = "1a2b3c4d5e6f"


def workload(step_ms=10.0, **kw):
    """``make`` as a sweep point's run of commit SHA: a workload, no pytest test."""
    run = make(step_ms, **kw)
    del run.meta[schema.TEST]
    run.meta.update({schema.WORKLOAD: "matmul", schema.PRESET: "tiny",
                     schema.OVERRIDES: {"case": "no_comm", "B": 1024},
                     schema.MESH: {"X": 4, "Y": 2}, schema.STEPS: 3, schema.WARMUP: 1,
                     schema.GIT_SHA: SHA})
    return run


@pytest.fixture
def reruns(monkeypatch):
    """The confirmations: each rerun of the candidate a run of ``step`` x 10 ms, each of the
    baseline (stored under ``confirm.BASELINE``) of 10 ms."""
    asked, speed = [], {"step": 1.0}

    def fresh(point, out, point_plots, index):
        asked.append((point, index))
        f = 1.0 if confirm.BASELINE in out.parts else speed["step"]
        return workload(10.0 * f, cpu=f)

    monkeypatch.setattr(repeat_runs, "fresh", fresh)
    return asked, speed


def test_the_point_is_rebuilt_from_the_runs_meta():
    p = confirm.point(workload())
    assert (p.workload, p.preset, p.mesh, p.overrides, p.chip, p.steps, p.warmup) == (
        "matmul", "tiny", "4x2", {"case": "no_comm", "B": 1024}, None, 3, 1)


def test_a_slowdown_the_reruns_do_not_show_is_not_a_regression(reruns, tmp_path):
    asked, _ = reruns
    v = judge.compare(workload(), workload(13.0, cpu=1.3))
    assert v.verdict == judge.REGRESSION  # one run per side, no history: it looks slower
    c = confirm.rerun_pair(v, 2, tmp_path, judge.Rule(), [[v.baseline]], installed=SHA)
    # the baseline's commit is the one installed too: both sides rerun, interleaved
    assert [i for _, i in asked] == [0, 0, 1, 1] and asked[0][0].mesh == "4x2"
    # the candidate's code ran at 13, 10 and 10 ms, the baseline's at 10, 10 and 10: the
    # reruns alone are compared (the first runs chose the pair), 10 and 10 against 10 and 10:
    # no change. The spread pools all six: the baseline's (no deviation) and the candidate's
    # (deviations 2l/3, -l/3, -l/3 with l = log 1.3: 2 l^2 / 3) over 2 + 2 degrees of freedom:
    # s = l / sqrt(6) = 0.107, and t(0.01; 4) s sqrt(1/2 + 1/2) = 3.75 x 0.107 = 0.40 > log 1.1:
    # unstable, never a regression
    assert (c.verdict, c.noise["s"]) == (judge.UNSTABLE, pytest.approx(math.log(1.3) / 6 ** 0.5))
    assert c.change == pytest.approx(0.0, abs=1e-12)
    assert c.noise["replicates"] == (2, 2)
    assert c.message.startswith("not confirmed by 2 rerun(s) of each side, interleaved, in "
                                "fresh processes, both sides' reruns judged by their mean: "
                                "unstable")


def test_a_real_13x_slowdown_is_confirmed(reruns, tmp_path):
    _, speed = reruns
    speed["step"] = 1.3  # the same program doing 1.3x the work: every rerun as slow
    v = judge.compare(workload(), workload(13.0, cpu=1.3))
    c = confirm.rerun_pair(v, 2, tmp_path, judge.Rule(), [[v.baseline]], installed=SHA)
    assert (c.verdict, c.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    assert c.message.startswith("confirmed by 2 rerun(s) of each side, interleaved, in fresh "
                                "processes, both sides' reruns judged by their mean: same "
                                "program, slower by 30%")
    # each side's three runs give the point its spread (all alike here: s = 0)
    assert c.noise["source"] == "own" and c.noise["runs"] == 6


def test_runs_that_cannot_be_rerun_here_say_so(reruns, tmp_path):
    asked, _ = reruns
    v = judge.compare(workload(), workload(13.0, cpu=1.3))
    other = confirm.rerun_pair(v, 2, tmp_path, judge.Rule(), [], installed="ffff00001111")
    assert other.verdict == judge.REGRESSION and other.message.endswith(
        f"not confirmed: the run's commit ({SHA}) is not the one installed here (ffff00001111)")
    test = judge.compare(make(), make(13.0, cpu=1.3))
    assert confirm.rerun_pair(test, 2, tmp_path, judge.Rule(), [], SHA).message.endswith(
        confirm.A_TEST)
    trace = workload(13.0, cpu=1.3)
    trace.meta[schema.TRACE_FILE] = "x.xplane.pb"
    v = judge.compare(workload(), trace)
    assert confirm.rerun_pair(v, 2, tmp_path, judge.Rule(), [], SHA).message.endswith(
        confirm.NOT_RERUNNABLE)
    assert asked == []


def test_compare_confirm_reruns_the_regressions_it_finds(reruns, tmp_path, monkeypatch, capsys):
    import json

    from harness.cli import main

    asked, _ = reruns
    monkeypatch.setattr(confirm, "git_state", lambda: {schema.GIT_SHA: SHA})
    workload().save(tmp_path / "base" / "r0")
    workload(13.0, cpu=1.3).save(tmp_path / "cand" / "r0")
    code = main(["compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--root",
                 str(tmp_path / "root"), "--confirm", "2", "--format", "json"])
    pair = json.loads(capsys.readouterr().out)["pairs"][0]
    assert len(asked) == 4 and (code, pair[schema.VERDICT]) == (0, judge.UNSTABLE)
    assert pair["message"].startswith("not confirmed by 2 rerun(s)")


def test_a_confirmation_weighs_its_few_runs_by_students_t():
    """An A/A pair of one commit's sweeps on the 2-core host: a CPU all-reduce's three runs of
    the baseline at 326, 302, 315 us (CPU time 435, 419, 441 us a step) and of the candidate,
    the first and two reruns, at 488, 485, 346 us (678, 633, 506). The spread pools the two
    sides' runs, 6 runs in 2 groups: 4 degrees of freedom. By the normal, the CPU time's change
    of 3.7 standard errors is p = 0.0001 and the wall step's 2.8 p = 0.0026: a confirmed
    regression. By Student's t with 4 degrees of freedom, p = 0.0105 and 0.0245, neither at
    the 1% level, and the spread hides a 10% change: unstable."""
    from scipy.stats import norm
    from scipy.stats import t as student

    base = [workload(w, cpu=c) for w, c in ((0.326, 4.35), (0.302, 4.19), (0.315, 4.41))]
    cand = [workload(w, cpu=c) for w, c in ((0.488, 6.78), (0.485, 6.33), (0.346, 5.06))]
    # the same arithmetic by hand: mean log change over the pooled spread's standard error
    for b, c, p_normal, p_t in ((np.log([4.35, 4.19, 4.41]), np.log([6.78, 6.33, 5.06]),
                                 1.1e-4, 0.0105),
                                (np.log([0.326, 0.302, 0.315]), np.log([0.488, 0.485, 0.346]),
                                 0.0026, 0.0245)):
        s = math.sqrt((((b - b.mean()) ** 2).sum() + ((c - c.mean()) ** 2).sum()) / 4)
        z = (c.mean() - b.mean()) / (s * math.sqrt(2 / 3))
        assert (norm.sf(z), student.sf(z, 4)) == (pytest.approx(p_normal, abs=2e-5),
                                                  pytest.approx(p_t, abs=5e-4))
    v = judge.compare(base[0], cand[0])
    c = confirm.with_reruns(v, cand[1:], judge.Rule(), [[base[0]]], base[1:])
    assert c.verdict == judge.UNSTABLE and c.noise["df"] == 4
    assert "(Student t, 4 degrees of freedom)" in c.message
    # the same six runs judged as a pair of sides by the normal (no confirmation) would fail
    spread = noise.spread([base, cand])
    assert judge.compare(base[0], cand[0], spread=spread,
                         reps=(base, cand)).verdict == judge.REGRESSION
    # a slowdown every run shows still stands: 1.3x, each side within 1%
    slow = [workload(13.0 * f, cpu=1.3 * f) for f in (0.99, 1.0, 1.01)]
    same = [workload(10.0 * f, cpu=f) for f in (0.99, 1.0, 1.01)]
    c = confirm.with_reruns(judge.compare(same[0], slow[0]), slow[1:], judge.Rule(),
                            [[same[0]]], same[1:])
    assert c.verdict == judge.REGRESSION and c.noise["df"] == 4


def test_compare_confirm_decides_a_pair_the_noise_left_inconclusive(reruns, tmp_path,
                                                                     monkeypatch, capsys):
    """A candidate doing 1.3x the work, measured 1.2x slower within the noise of one run a side
    (inconclusive: the shared runner's trips test, 2 of 6 tries): its reruns decide it, here a
    regression (every rerun 1.3x); a pair measured as fast is not rerun."""
    import json

    from harness.cli import main

    asked, speed = reruns
    speed["step"] = 1.3
    monkeypatch.setattr(confirm, "git_state", lambda: {schema.GIT_SHA: SHA})
    base, cand = workload(), workload(12.0, cpu=1.2, work=1.3, spread=0.3)
    assert judge.compare(base, cand).verdict == judge.INCONCLUSIVE  # the premise
    base.save(tmp_path / "base" / "r0")
    cand.save(tmp_path / "cand" / "r0")
    args = ["--root", str(tmp_path / "root"), "--confirm", "2", "--format", "json"]
    code = main(["compare", str(tmp_path / "base"), str(tmp_path / "cand"), *args])
    pair = json.loads(capsys.readouterr().out)["pairs"][0]
    assert len(asked) == 4 and (code, pair[schema.VERDICT]) == (1, judge.REGRESSION)
    assert pair["message"].startswith("confirmed by 2 rerun(s)")
    asked.clear()
    workload().save(tmp_path / "same" / "r0")
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "same"), *args]) == 0
    assert asked == []
