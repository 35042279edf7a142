"""Each point's own noise (harness.regress.noise), the unstable verdict, the figure that decides
and the two-layout headline agreeing with the verdict: hand-made runs whose verdicts follow
from arithmetic."""
import json
import math

import pytest
from scipy.stats import norm
from test_regress_judge import make

from harness import schema
from harness.cli import main
from harness.regress import judge, noise

Z01 = norm.isf(0.01)  # 2.326: the one-sided 1% point


def baselines(d: float) -> list:
    """Three runs of the same code whose log median step (wall and CPU) is -d, 0, +d around
    10 ms: the sample SD of their logs is d."""
    return [make(10.0 * math.exp(x), cpu=math.exp(x)) for x in (-d, 0.0, d)]


def test_the_pooled_spread_is_the_sample_sd_within_each_code():
    assert noise.pooled([[0.0, 0.1, 0.2]])[0] == pytest.approx(0.1)
    # two groups, each its own mean: deviations (-0.1, 0.1) and (-0.05, 0.05) over 2 dof
    assert noise.pooled([[1.0, 1.2], [5.0, 5.1]])[0] == pytest.approx(
        math.sqrt((0.02 + 0.005) / 2))
    assert math.isnan(noise.pooled([[0.0, 0.1]])[0])  # under MIN_RUNS runs


@pytest.mark.parametrize("d", [0.02, 0.06, 0.075, 0.085, 0.12])
def test_a_13x_slowdown_counts_only_beyond_the_points_own_spread(d):
    runs = baselines(d)
    s = noise.spreads([runs])[make().meta[schema.TEST]]
    assert (s.wall, s.cpu, s.runs) == (pytest.approx(d), pytest.approx(d), 3)
    v = judge.compare(runs[1], make(13.0, cpu=1.3), spread=s)
    # a regression iff log(1.3) > z sqrt(2) s (and > log 1.1, the threshold)
    caught = math.log(1.3) > Z01 * math.sqrt(2) * d
    assert (v.verdict == judge.REGRESSION) == caught
    # else unstable: z sqrt(2) s > log 1.1 for every d here that misses it
    assert v.verdict == (judge.REGRESSION if caught else judge.UNSTABLE)
    assert v.noise["source"] == noise.OWN and v.noise["s"] == pytest.approx(d)
    assert "this point's own spread, s=" in v.message


def test_a_quiet_point_is_ok_and_an_unstable_one_is_listed_apart():
    quiet = noise.spreads([baselines(0.02)])[make().meta[schema.TEST]]
    assert Z01 * math.sqrt(2) * 0.02 < math.log(1.1)  # stable: 0.066 < 0.095
    assert judge.compare(make(), make(), spread=quiet).verdict == judge.OK
    wide = noise.spreads([baselines(0.05)])[make().meta[schema.TEST]]
    assert Z01 * math.sqrt(2) * 0.05 > math.log(1.1)  # unstable: 0.164 > 0.095
    v = judge.compare(make(), make(), spread=wide)
    assert (v.verdict, v.cause) == (judge.UNSTABLE, judge.SPREAD)
    assert v.message.startswith("unstable: runs of the same code spread 0.05 (SD of the log "
                                "CPU time per step), too wide to tell a change of 10%")
    # the constant where the runs of one code are too few, and the verdict says so
    v = judge.compare(make(), make())
    assert v.noise["source"] == noise.CONSTANT and "the constant 0.05 (fewer than 3" in v.message


def test_compare_of_two_directories_measures_each_points_spread(tmp_path, capsys):
    for i, run in enumerate(baselines(0.12)):
        run.save(tmp_path / "base" / f"r{i}")
    make(13.0, cpu=1.3).save(tmp_path / "cand" / "r0")
    code = main(["compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--root",
                 str(tmp_path / "none"), "--format", "json"])
    pair = json.loads(capsys.readouterr().out)["pairs"][0]
    # 1.3x within z sqrt(2) 0.12 = 0.39 > log 1.3: unstable, exit 0
    assert (code, pair[schema.VERDICT]) == (0, judge.UNSTABLE)
    assert pair["noise"]["runs"] == 3 and pair["noise"]["s"] == pytest.approx(0.12)
    main(["compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--root",
          str(tmp_path / "none")])
    assert "unstable (too noisy to judge at the threshold; not a regression, not ok): " \
           "test_model.py::test_mlp (s=0.12, CPU time per step, 3 runs)" in capsys.readouterr().out


def test_more_cpu_time_never_decides_when_the_wall_step_got_faster():
    # the point: wall step -5%, CPU time per step +29% (threads spinning)
    v = judge.compare(make(), make(9.5, cpu=1.29))
    assert v.verdict == judge.OK
    assert "CPU time per step +29%; decided by the wall step: the CPU time per step grew " \
           "while the wall step got faster" in v.message
    # the wall step slower too: the CPU time per step still decides
    assert judge.compare(make(), make(10.5, cpu=1.29)).verdict == judge.REGRESSION
    # on a host that moved (the probe 20% faster: a load went away), neither tells: inconclusive
    v = judge.compare(make(), make(9.5, cpu=1.29, host=1.2))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    assert "the CPU time per step grew while the wall step got faster, on a host that moved" \
        in v.message


def layouts(step_scale: float, wall_ms: float):
    """Two layouts: different fingerprints, ops matched by source op; B's traced step
    ``step_scale`` x A's, its wall step ``wall_ms`` (10 ms in A) with as much CPU time."""
    a = make(collectives=False)
    b = make(wall_ms, cpu=wall_ms / 10, ops_scale=step_scale, fingerprint="f2",
             collectives=False)
    for run in (a, b):
        run.ops[schema.SOURCE_OP] = "jit(mlp)/" + run.ops[schema.OP]
    return a, b


def test_the_two_layout_headline_and_the_verdict_decide_from_the_traced_step():
    # the layouts story: the traced step 1.67x slower, the untraced wall step 14% faster
    a, b = layouts(1.67, 8.6)
    v = judge.compare(a, b, layouts_first=True)
    assert v.layouts.headline.startswith("B is 1.67x slower than A")
    assert (v.verdict, v.decided) == (judge.REGRESSION, judge.TRACED)
    assert "decided by the traced step, the step the layouts' line breaks down" in v.message
    # and the reverse: B's traced step faster, its wall step slower: never a regression
    a, b = layouts(0.6, 13.0)
    v = judge.compare(a, b, layouts_first=True)
    assert v.layouts.headline.startswith("A is 1.67x slower than B")
    assert (v.verdict, v.decided) == (judge.IMPROVEMENT, judge.TRACED)


def test_more_work_alone_is_no_regression_more_work_and_slower_is_one():
    # docs/regression.md's table and the code, one rule: more work per device counts with a
    # worse step (a recomputation that saves memory may cost no time)
    v = judge.compare(make(), make(work=2.0, fingerprint="f2"))
    assert (v.verdict, v.cause) == (judge.OK, judge.PROGRAM) and v.program["more_work"]
    v = judge.compare(make(), make(20.0, cpu=2.0, work=2.0, fingerprint="f2"))
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.PROGRAM)


def test_the_history_is_the_earlier_runs_the_candidate_left_out(tmp_path, capsys):
    """Nights under --root, each a directory of two tests' runs: three earlier nights of the same
    code (test_mlp's log SD 0.12), the candidate's night, and a night after it. test_mlp's spread
    is the three earlier runs' alone: the candidate never widens its own noise, and a later run
    is no history of it."""
    root, other = tmp_path / "root", "test_model.py::test_other"
    nights = [*baselines(0.12), make(13.0, cpu=1.3), make(30.0, cpu=3.0)]
    for i, run in enumerate(nights):
        day = f"2026-11-2{i}T00:00:00"
        run.meta[schema.TIME] = day
        run.save(root / f"night{i}" / "mlp")
        steady = make(10.0, test=other)
        steady.meta[schema.TIME] = day
        steady.save(root / f"night{i}" / "other")
    main(["compare", str(root / "night2"), str(root / "night3"), "--root", str(root),
          "--format", "json"])
    pairs = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pairs"]}
    mlp = next(p for name, p in pairs.items() if "test_mlp" in name)
    assert mlp["noise"]["runs"] == 3 and mlp["noise"]["s"] == pytest.approx(0.12)
