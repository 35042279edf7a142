"""harness.runs.detect: the smallest slowdown of one op alone a comparison flags, checked against
the verdicts themselves (the op slowed by it, and by a little less, in the candidate)."""
import math

import numpy as np
import pytest
from test_cli_compare import run_cli
from test_runs_history import drawn_run
from test_runs_regress import OPS, by_op, many_ops, save, verdicts

from harness import schema
from harness.runs import detect, noise, regress

MANY = many_ops(40)  # 40 equal elementwise ops, 2.5% of the step each
RNG = np.random.default_rng(7)
OFFSETS = {op[0]: float(np.exp(0.05 * RNG.standard_normal())) for op in MANY}  # run-to-run 5%
PAIR = {"base_kw": {"ops": MANY, "seed": 2, "jitter": 0.05},
        "cand": {"ops": MANY, "seed": 1, "jitter": 0.05}}


def pair(root, slowed: dict | None = None):
    scale = {op: OFFSETS[op] * (slowed or {}).get(op, 1.0) for op in OFFSETS}
    return verdicts(root, base_kw=PAIR["base_kw"], cand_kw=dict(PAIR["cand"], scale=scale))


@pytest.mark.parametrize("op", ["fusion.0", "fusion.3", "fusion.17", "fusion.30", "fusion.39"])
def test_an_op_slowed_by_what_it_could_detect_is_flagged_and_a_little_less_is_not(tmp_path, op):
    """One baseline, 40 ops moving 5% between runs, 5% per-step jitter: the run-to-run test
    binds (the U test of 10 vs 10 separated samples reaches 1e-5). 2% either side of the
    figure, the verdict flips: the figure is where the rule's own decision changes."""
    d = by_op(pair(tmp_path / "aa")).loc[op, schema.DETECTABLE]
    assert 0.10 < d < 1.0
    below = by_op(pair(tmp_path / "below", {op: (1 + d) * 0.98})).loc[op]
    above = by_op(pair(tmp_path / "above", {op: (1 + d) * 1.02})).loc[op]
    assert below[schema.VERDICT] in (regress.NOISE, regress.UNCHANGED)
    assert above[schema.VERDICT] == regress.REGRESSION
    assert math.isnan(above[schema.DETECTABLE])  # flagged: nothing left to say


def test_with_a_history_each_op_flags_from_its_own_figure(tmp_path):
    """Eight baselines (half the ops 25% between runs, half 2%): a steady op can be seen far
    sooner than a jumpy one, and each flips where its figure says."""
    rng = np.random.default_rng(0)
    base = [drawn_run(tmp_path, f"b{i}", rng) for i in range(8)]
    cand_rng = np.random.default_rng(99)
    t = by_op(regress.compare_runs(base, drawn_run(tmp_path, "c", cand_rng)))
    steady, jumpy = t.loc["fusion.1", schema.DETECTABLE], t.loc["fusion.0", schema.DETECTABLE]
    assert steady < 0.3 < jumpy
    for op, d in (("fusion.1", steady), ("fusion.0", jumpy)):
        for k, flagged in ((0.98, False), (1.02, True)):
            v = regress.compare_runs(base, drawn_run(tmp_path, f"{op}-{k}",
                                                     np.random.default_rng(99),
                                                     {op: (1 + d) * k}))
            assert (by_op(v).loc[op, schema.VERDICT] == regress.REGRESSION) is flagged, (op, k)


def test_too_few_steps_can_flag_nothing(tmp_path):
    """3 vs 3 steps: the U test's smallest p is 2 / C(6, 3) = 0.1, above alpha: never."""
    v = verdicts(tmp_path, base_kw={"steps": 3}, cand_kw={"steps": 3, "seed": 1})
    tested = v.ops[v.ops[schema.BASELINE_SHARE] >= 0.01]
    assert np.isinf(tested[schema.DETECTABLE]).all()
    assert "never (too few steps)" in v.could_see()


def test_the_threshold_bounds_it_below(tmp_path):
    """Three ops (too few for a run-to-run term), 1% jitter, 10 vs 10 steps: the U test rejects
    as soon as the samples separate (a few percent), so the 10% threshold binds: from
    (1 + 0.10) / (1 + change) - 1."""
    v = verdicts(tmp_path, cand_kw={"seed": 1})
    t = by_op(v)
    for op, *_ in OPS[:3]:
        change = t.loc[op, schema.CHANGE]
        assert t.loc[op, schema.DETECTABLE] == pytest.approx(1.10 / (1 + change) - 1, rel=1e-9)
    assert math.isnan(t.loc["copy.1", schema.DETECTABLE])  # 0.5% of the step: not tested


def test_u_factor_is_the_first_slowdown_from_which_the_u_test_rejects():
    """Against a scan of the scalar U test on a fine grid of slowdowns."""
    rng = np.random.default_rng(3)
    for n, m, level in ((10, 10, 1e-3), (8, 5, 0.01), (30, 10, 1e-4)):
        a = np.exp(0.1 * rng.standard_normal(n))
        z = np.exp(0.1 * rng.standard_normal(m))
        f = detect.u_factor(a, z, level)
        grid = np.exp(np.linspace(0, 1.5, 3001))
        rejects = np.array([noise.u_test(a, z * g) <= level and g * np.median(z) > np.median(a)
                            for g in grid])
        first = grid[len(grid) - int(np.argmin(rejects[::-1]))]  # all reject from here on
        assert f == pytest.approx(first, rel=1e-3)


def test_u_tests_in_one_call_match_the_scalar_test():
    rng = np.random.default_rng(4)
    a = rng.uniform(1, 2, 10)
    zs = rng.uniform(1, 2.5, (50, 10))
    assert noise.u_tests(a, zs) == pytest.approx([noise.u_test(a, z) for z in zs], rel=1e-12)


def test_critical_on_top_is_the_run_to_run_null_with_the_op_moved_to_the_top():
    """Per op, the scalar run_to_run of the changes with that op's put far above the rest."""
    rng = np.random.default_rng(5)
    r = 0.1 * rng.standard_t(3, 30)
    se = np.abs(0.03 * rng.standard_normal(30))
    level = np.full(30, 0.05 / 30)
    got = noise.critical_on_top(r, se, level)
    for i in range(30):
        slowed = r.copy()
        slowed[i] = r.max() + 10
        assert got[i] == pytest.approx(noise.run_to_run(slowed, se).critical(level)[i], rel=1e-9)


def test_compare_prints_what_it_could_have_seen(tmp_path, capsys):
    base, cand = save(tmp_path, "base"), save(tmp_path, "cand", seed=1)
    code, out, _ = run_cli(capsys, base, cand)
    assert code == 0
    assert "flags from" in out
    line = next(x for x in out.splitlines() if x.startswith("could flag one op slowed alone:"))
    assert line.startswith("could flag one op slowed alone: fusion.12 (60% of the step) from +")
    code, out, _ = run_cli(capsys, base, cand, "--format", "md")
    assert "could flag one op slowed alone:" in out and "| flags from |" in out


def test_an_op_that_leaves_the_tested_family_moves_the_figure_to_where_it_leaves():
    """Eight tested ops, the first 60% of the candidate's step; the last is tested only for its
    candidate share, 1.2% (0.9% in the baseline). Slowed by x, op 0 shrinks the others' shares
    by 1 + 0.6 x, so op 7 leaves the family beyond x = (0.012 / 0.01 - 1) / 0.6 = 1/3, and with
    seven ops left the run-to-run term drops out (fewer than noise.MIN_OPS_FOR_SPREAD). Here
    that term alone would need e^5; without it the threshold and the U test pass from +10%. So
    op 0 is first flagged where op 7 leaves: +33.3%."""
    rng = np.random.default_rng(0)
    steps = [(1 + 0.01 * rng.standard_normal(10), 1 + 0.01 * rng.standard_normal(10))
             for _ in range(8)]
    base = np.array([0.6, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.009])
    cand = np.array([0.6, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.012])

    def critical(tested, level, rows):
        n = np.ones(int(tested.sum())) * (5.0 if tested.sum() >= noise.MIN_OPS_FOR_SPREAD else 0)
        return n if rows is None else n[rows]

    got = detect.per_op(np.zeros(8), (base, cand), base, steps, critical, alpha=0.05,
                        threshold=0.10, min_share=0.01)
    assert got[0] == pytest.approx(1 / 3, rel=1e-9)
    assert got[1] == pytest.approx(0.2 / 0.05, rel=1e-9)  # op 1 (5%) pushes it out at x = 4
