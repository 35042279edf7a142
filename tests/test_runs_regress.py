"""harness.runs.regress: noise-aware verdicts on small synthetic runs (a few ops, 10 steps each)."""
import math

import numpy as np
import pandas as pd
import pytest

from harness import schema, shares
from harness.errors import HarnessError
from harness.runs import regress
from harness.runs.run import Run

PROGRAM = "jit_step"
# op, opcode, category, bound, collective, group size, time per step (s), roofline time (s).
# A 10 ms step; copy.1 is 0.05 ms = 0.5% of it, below the default min_share of 1%.
OPS = (
    ("fusion.12", "fusion", "matmul", "compute", "", 1, 6.0e-3, 4.8e-3),           # 80%
    ("all-reduce.3", "all-reduce", "collective", "comm", "all-reduce", 4, 3.0e-3, 2.76e-3),  # 92%
    ("fusion.7", "fusion", "elementwise", "memory", "", 1, 0.95e-3, 0.475e-3),     # 50%
    ("copy.1", "copy", "copy", schema.UNMODELED, "", 1, 0.05e-3, math.nan),
)
META = {"workload": "matmul", "mesh": {"X": 4}, "device_kind": "cpu", "device_count": 4}


def frames(scale=None, *, jitter=0.01, seed=0, steps=10, ops=OPS, samples=None):
    """(OPS table, per-step samples): each op's samples are its time x scale x (1 + jitter*N(0,1)).

    ``samples`` maps an op to explicit per-step samples instead.
    """
    rng = np.random.default_rng(seed)
    rows, step_rows = [], []
    for op, opcode, cat, bound, coll, group, t, pred in ops:
        noise = 1 + jitter * rng.standard_normal(steps)  # drawn for every op: same seed, same noise
        s = np.asarray(samples[op]) if samples and op in samples else \
            t * (scale or {}).get(op, 1.0) * noise
        step_rows += [{schema.PROGRAM: PROGRAM, schema.OP: op, schema.STEP: i,
                       schema.MEASURED_S: float(v)} for i, v in enumerate(s)]
        m = float(np.median(s))
        rows.append({schema.PROGRAM: PROGRAM, schema.OP: op, schema.OPCODE: opcode,
                     schema.CATEGORY: cat, schema.COUNT: 1, schema.MEASURED_S: m,
                     schema.PREDICTED_S: pred, schema.EFFICIENCY: pred / m,
                     schema.GAP_S: m - (0.0 if math.isnan(pred) else pred), schema.BOUND: bound,
                     schema.COLLECTIVE: coll, schema.GROUP_SIZE: group})
    ops_df = pd.DataFrame(rows)
    ops_df[schema.SHARE] = ops_df[schema.MEASURED_S] / ops_df[schema.MEASURED_S].sum()
    return ops_df, pd.DataFrame(step_rows)


def save(root, name, scale=None, *, meta=META, no_steps=False, **kw):
    """A stored run under ``root/name`` built by ``frames``."""
    ops, steps = frames(scale, **kw)
    return Run(meta=meta, ops=ops, steps=None if no_steps else steps).save(root / name)


def verdicts(tmp_path, base_kw=None, cand_kw=None, **rule):
    b = Run.load(save(tmp_path, "base", **(base_kw or {})))
    c = Run.load(save(tmp_path, "cand", **(cand_kw or {})))
    return regress.compare_runs(b, c, **rule)


def by_op(v) -> pd.DataFrame:
    return v.table().set_index(schema.OP)


def test_identical_runs_are_unchanged(tmp_path):
    v = verdicts(tmp_path)
    t = by_op(v)
    assert set(t[schema.VERDICT]) == {regress.UNCHANGED}
    assert (t[schema.CHANGE] == 0.0).all()
    # The same samples: U = n*m/2, nothing to reject; copy.1 (0.5% of the step) is not tested.
    assert (t[schema.P_VALUE].drop(index="copy.1") == 1.0).all()
    assert math.isnan(t.loc["copy.1", schema.P_VALUE])
    assert not v.regressed and v.headline().startswith("OK")


def test_op_twice_as_slow_is_a_regression_named_in_the_book_terms(tmp_path):
    v = verdicts(tmp_path, cand_kw={"scale": {"all-reduce.3": 2.0}})
    t = by_op(v)
    row = t.loc["all-reduce.3"]
    assert row[schema.VERDICT] == regress.REGRESSION
    assert row[schema.CHANGE] == pytest.approx(1.0)  # same noise, doubled: median doubles
    # 10 vs 10 samples, fully separated: the smallest two-sided p is 2 / C(20, 10).
    assert 2 / math.comb(20, 10) <= row[schema.P_VALUE] <= 1e-3
    assert row[schema.CANDIDATE_EFFICIENCY] == pytest.approx(0.92 / 2, rel=0.05)
    text = row[schema.EXPLANATION]
    # A group of 4 on mesh {"X": 4}: the book's AllReduce_X.
    assert text.startswith("all-reduce.3 (all-reduce over axis X (4 devices), "
                           "communication-bound)")
    assert "from 92% to 46% of its roofline" in text and "+100%" in text
    assert set(t.drop(index=["all-reduce.3", regress.STEP_TOTAL])[schema.VERDICT]) == {
        regress.UNCHANGED}
    # The step goes from 10 ms to 13 ms: +30%, also a regression.
    step = t.loc[regress.STEP_TOTAL]
    assert step[schema.VERDICT] == regress.REGRESSION
    assert step[schema.CHANGE] == pytest.approx(3.0 / 10.0, abs=0.02)
    assert v.regressed and list(v.regressions[schema.OP]) == [regress.STEP_TOTAL, "all-reduce.3"]
    assert v.ops[schema.OP].iloc[0] == "all-reduce.3"  # regressions first
    assert v.headline().startswith("REGRESSION: all-reduce.3;")


def test_matmul_regression_explained_as_compute_bound(tmp_path):
    v = verdicts(tmp_path, cand_kw={"scale": {"fusion.12": 1.25}})
    row = by_op(v).loc["fusion.12"]
    assert row[schema.VERDICT] == regress.REGRESSION
    # 80% of the roofline at 6 ms; 7.5 ms for the same work is 80% / 1.25 = 64%.
    assert "fusion.12 (matmul, compute-bound) fell from 80% to 64% of its roofline" in \
        row[schema.EXPLANATION]


def test_jitter_within_noise_is_not_a_regression(tmp_path):
    v = verdicts(tmp_path, base_kw={"jitter": 0.03, "seed": 1},
                 cand_kw={"jitter": 0.03, "seed": 2})
    t = by_op(v)
    assert (t[schema.CHANGE].abs() < 0.10).all()
    assert regress.REGRESSION not in set(t[schema.VERDICT])
    assert not v.regressed


def test_change_beyond_threshold_but_not_significant_is_noise(tmp_path):
    # Medians 1.0 ms -> 1.2 ms (+20%), but the samples overlap almost entirely.
    base = [0.5e-3, 0.7e-3, 0.9e-3, 1.0e-3, 1.1e-3, 1.3e-3, 1.5e-3]
    cand = [0.6e-3, 0.8e-3, 1.0e-3, 1.2e-3, 1.3e-3, 1.4e-3, 1.6e-3]
    ops = OPS[:1] + (("fusion.9", "fusion", "matmul", "compute", "", 1, 1e-3, 0.5e-3),)
    v = verdicts(tmp_path, base_kw={"ops": ops, "steps": 7, "samples": {"fusion.9": base}},
                 cand_kw={"ops": ops, "steps": 7, "samples": {"fusion.9": cand}})
    row = by_op(v).loc["fusion.9"]
    assert row[schema.CHANGE] == pytest.approx(0.2)
    assert row[schema.P_VALUE] > 0.05
    assert row[schema.VERDICT] == regress.NOISE and "not significant" in row[schema.NOTE]


def test_tiny_op_twice_as_slow_never_flags(tmp_path):
    v = verdicts(tmp_path, cand_kw={"scale": {"copy.1": 2.0}})
    t = by_op(v)
    assert t.loc["copy.1", schema.CHANGE] == pytest.approx(1.0)
    assert t.loc["copy.1", schema.VERDICT] == regress.NOISE
    assert "below min share" in t.loc["copy.1", schema.NOTE]
    # The step moves by 0.05 ms of 10 ms = 0.5%.
    assert t.loc[regress.STEP_TOTAL, schema.CHANGE] == pytest.approx(0.005, abs=0.005)
    assert not v.regressed
    # With min_share lowered below its 0.5% share, the same change counts.
    assert verdicts(tmp_path / "x", cand_kw={"scale": {"copy.1": 2.0}}, min_share=0.001).regressed


def test_improvement_is_not_a_regression(tmp_path):
    v = verdicts(tmp_path, cand_kw={"scale": {"fusion.12": 0.5}})
    t = by_op(v)
    assert t.loc["fusion.12", schema.VERDICT] == regress.IMPROVEMENT
    assert "rose from 80% to 160% of its roofline" in t.loc["fusion.12", schema.EXPLANATION]
    assert t.loc[regress.STEP_TOTAL, schema.VERDICT] == regress.IMPROVEMENT
    assert not v.regressed


def test_min_p_value_is_exact():
    assert regress.min_p_value(3, 3) == pytest.approx(2 / 20)
    assert regress.min_p_value(4, 4) == pytest.approx(2 / 70)
    assert regress.min_p_value(5, 5) == pytest.approx(2 / 252)
    assert regress.min_p_value(0, 5) == 1.0


def test_too_few_steps_are_inconclusive_not_regressions(tmp_path):
    # 3 vs 3 steps: the U test cannot go below p = 2/20 = 0.1 > 0.05, so even 2x cannot be told.
    v = verdicts(tmp_path, base_kw={"steps": 3},
                 cand_kw={"steps": 3, "scale": {"fusion.12": 2.0, "all-reduce.3": 1.3}})
    t = by_op(v)
    assert t.loc["fusion.12", schema.P_VALUE] == pytest.approx(2 / 20)  # fully separated
    for op in ("fusion.12", "all-reduce.3", regress.STEP_TOTAL):
        assert t.loc[op, schema.VERDICT] == regress.INCONCLUSIVE
        assert "too few steps to decide (3 vs 3" in t.loc[op, schema.NOTE]
    assert not v.regressed and v.headline().startswith("INCONCLUSIVE")


def test_four_steps_decide_a_single_tested_op_but_not_a_small_one_among_three(tmp_path):
    # 4 vs 4 steps reach p = 2/70 = 0.029: enough when one op is tested (alpha / 1). Among three,
    # Benjamini-Hochberg weighs each by its baseline share (0.6, 0.3, 0.095; mean 0.332): fusion.12
    # (weight 1.81) gets q = 0.029 / 1.81 x 3 = 0.047 <= 0.05, fusion.7 (weight 0.29) gets
    # q = 0.029 / 0.29 x 3 = 0.30, and 4 vs 4 steps could never bring it to 0.05 (the medians
    # carry 1% jitter: the shares, hence the weights, are within 1% of these).
    ops = OPS[:1] + (("fusion.9", "fusion", "matmul", "compute", "", 1, 0.05e-3, 0.02e-3),)
    v = verdicts(tmp_path, base_kw={"steps": 4, "ops": ops},
                 cand_kw={"steps": 4, "ops": ops, "scale": {"fusion.12": 2.0}})
    assert v.tested == 1  # fusion.9 is 0.05 / 6.05 = 0.8% of the step: below min share
    assert by_op(v).loc["fusion.12", schema.VERDICT] == regress.REGRESSION
    v = verdicts(tmp_path / "3", base_kw={"steps": 4}, cand_kw={"steps": 4,
                                                                 "scale": {"fusion.12": 2.0}})
    assert v.tested == 3
    row = by_op(v).loc["fusion.12"]
    assert row[schema.Q_VALUE] == pytest.approx(2 / 70 / (0.6 / (0.995 / 3)) * 3, rel=0.01)
    assert row[schema.VERDICT] == regress.REGRESSION
    v = verdicts(tmp_path / "7", base_kw={"steps": 4}, cand_kw={"steps": 4,
                                                                 "scale": {"fusion.7": 2.0}})
    row = by_op(v).loc["fusion.7"]
    assert row[schema.Q_VALUE] == pytest.approx(2 / 70 / (0.095 / (0.995 / 3)) * 3, rel=0.01)
    assert row[schema.VERDICT] == regress.INCONCLUSIVE
    assert row[schema.NOTE].startswith("too few steps to decide (4 vs 4")


def test_runs_without_step_samples_are_inconclusive(tmp_path):
    v = verdicts(tmp_path, base_kw={"no_steps": True},
                 cand_kw={"no_steps": True, "scale": {"fusion.12": 2.0, "fusion.7": 1.2}})
    t = by_op(v)
    assert t.loc["fusion.12", schema.VERDICT] == regress.INCONCLUSIVE
    assert t.loc["fusion.12", schema.NOTE] == "no per-step samples to test"
    assert sum("no per-step samples" in w for w in v.warnings) == 2
    assert not v.regressed
    # Without samples the step total is the sum of op medians: 10 ms -> 16.19 ms.
    assert t.loc[regress.STEP_TOTAL, schema.BASELINE_S] == pytest.approx(10e-3, rel=0.01)


def test_new_and_gone_ops(tmp_path):
    extra = (("fusion.99", "fusion", "elementwise", "memory", "", 1, 1e-3, 0.5e-3),)
    v = verdicts(tmp_path, base_kw={"ops": OPS}, cand_kw={"ops": OPS[:3] + extra})
    t = by_op(v)
    assert t.loc["fusion.99", schema.VERDICT] == regress.NEW
    assert t.loc["copy.1", schema.VERDICT] == regress.GONE
    assert math.isnan(t.loc["fusion.99", schema.CHANGE])
    assert not v.regressed


def test_different_runs_warn_but_compare(tmp_path):
    b = Run.load(save(tmp_path, "base"))
    c = Run.load(save(tmp_path, "cand", {"all-reduce.3": 2.0},
                        meta=dict(META, mesh={"X": 2, "Y": 2})))
    v = regress.compare_runs(b, c)
    assert len(v.warnings) == 1 and "mesh" in v.warnings[0]
    assert len(v.ops) == len(OPS)
    # No single axis of the 2x2 mesh has 4 devices: the group is named by its size only.
    assert "all-reduce.3 (all-reduce over 4 devices, communication-bound)" in \
        by_op(v).loc["all-reduce.3", schema.EXPLANATION]


def test_runs_timed_by_different_rules_say_so(tmp_path):
    """A CPU run timed as host shares against one stored before runs recorded their rule (every
    op then a median over devices): one warning naming both; the same rule on both: none."""
    older = Run.load(save(tmp_path, "older"))  # no op_timing key
    shared = dict(META, **{schema.OP_TIMING: shares.HOST_SHARE})
    new = Run.load(save(tmp_path, "new", meta=shared))
    v = regress.compare_runs(older, new)
    assert len(v.warnings) == 1
    assert "baseline device_median, candidate host_share" in v.warnings[0]
    again = Run.load(save(tmp_path, "again", meta=shared))
    assert regress.compare_runs(new, again).warnings == []
    median = Run.load(save(tmp_path, "median", meta=dict(META, **{
        schema.OP_TIMING: shares.DEVICE_MEDIAN})))
    assert regress.compare_runs(older, median).warnings == []


@pytest.mark.parametrize("rule", [{"alpha": 0.0}, {"alpha": 1.5}, {"threshold": -0.1},
                                  {"min_share": 1.0}, {"threshold": float("nan")}])
def test_bad_rule_names_the_knob(rule):
    with pytest.raises(HarnessError, match=next(iter(rule))):
        regress.Rule(**rule)


def test_ops_table_without_needed_columns_is_rejected(tmp_path):
    ops, steps = frames()
    bad = ops.drop(columns=[schema.MEASURED_S])
    path = Run(meta=META, ops=bad, steps=steps).save(tmp_path / "bad")
    good = Run.load(save(tmp_path, "good"))
    with pytest.raises(HarnessError, match=schema.MEASURED_S):
        regress.compare_runs(good, Run.load(path))


def test_benjamini_hochberg_matches_scipy_and_the_worked_example():
    from scipy.stats import false_discovery_control  # an independent implementation

    # q_(k) = min over j >= k of p_(j) * m / j: 0.5 * 4/4, 0.03 * 4/3 = 0.04, 0.02 * 4/2 = 0.04
    assert regress.noise.bh_adjust(np.array([0.01, 0.02, 0.03, 0.5])) == pytest.approx(
        [0.04, 0.04, 0.04, 0.5])
    p = np.random.default_rng(3).uniform(size=50) ** 3
    assert regress.noise.bh_adjust(p) == pytest.approx(false_discovery_control(p))
    q = regress.noise.bh_adjust(np.array([0.01, np.nan, 0.04]))  # NaN is not counted: m = 2
    assert q[0] == pytest.approx(0.02) and math.isnan(q[1]) and q[2] == pytest.approx(0.04)


def test_weighted_benjamini_hochberg_is_bh_on_p_over_the_weights():
    bh = regress.noise.bh_adjust
    p = np.random.default_rng(4).uniform(size=20) ** 2
    assert bh(p, weights=np.full(20, 7.0)) == pytest.approx(bh(p))  # equal weights: plain BH
    # weights 3:1 -> 1.5, 0.5 (mean 1): p / w = 0.0133, 0.04; q = 0.0133 x 2/1, 0.04 x 2/2
    assert bh(np.array([0.02, 0.02]), weights=np.array([3.0, 1.0])) == pytest.approx(
        [0.02 / 1.5 * 2, 0.04])
    with pytest.raises(ValueError, match="positive"):
        bh(np.array([0.02, 0.02]), weights=np.array([1.0, 0.0]))


def many_ops(n=40, t=0.25e-3):
    """``n`` equal elementwise ops (1/n of the step each)."""
    return tuple((f"fusion.{i}", "fusion", "elementwise", "memory", "", 1, t, t / 2)
                 for i in range(n))


def test_run_to_run_shifts_are_noise_but_a_real_change_stands_out(tmp_path):
    # Back-to-back runs: every op moves by its own +-15% (sigma) between runs, steps vary 1%.
    # Per-step U tests alone see each shift as significant (10 vs 10 separated samples).
    ops = many_ops()
    rng = np.random.default_rng(7)
    shifts = {op[0]: float(np.exp(0.15 * rng.standard_normal())) for op in ops}
    v = verdicts(tmp_path, cand_kw={"ops": ops, "scale": shifts, "seed": 1},
                 base_kw={"ops": ops, "seed": 2})
    t = by_op(v).drop(index=regress.STEP_TOTAL)
    beyond = t[t[schema.CHANGE].abs() > 0.10]
    assert len(beyond) > 5 and (beyond[schema.P_VALUE] < 1e-3).all()  # U alone would flag
    assert not v.regressed
    assert v.run_to_run == pytest.approx(0.15, rel=0.4)  # MAD of 40 draws: a rough estimate
    assert set(beyond[schema.VERDICT]) <= {regress.NOISE, regress.INCONCLUSIVE}
    assert "too noisy to decide: run-to-run noise" in beyond[schema.NOTE].iloc[0]
    # The same runs with one op 3x slower (ln 3 = 1.1, seven sigmas): flagged, alone.
    v = verdicts(tmp_path / "ab", cand_kw={"ops": ops, "scale": dict(shifts, **{"fusion.3": 3.0}),
                                           "seed": 1}, base_kw={"ops": ops, "seed": 2})
    assert list(v.ops.loc[v.ops[schema.VERDICT] == regress.REGRESSION, schema.OP]) == ["fusion.3"]


def test_op_regressions_the_step_cannot_see_carry_its_verdict(tmp_path):
    # fusion.12 (6 ms) takes 3..9 ms per step in both runs: the step total's noise is
    # 1.2533 x 1.4826 MAD x sqrt(2/10), about 1.2 ms. fusion.7 doubles: +0.95 ms, below it, yet
    # its own test rejects. The step row says so instead of contradicting its op.
    wide = {"fusion.12": np.linspace(3e-3, 9e-3, 10)}
    v = verdicts(tmp_path, base_kw={"samples": wide},
                 cand_kw={"samples": wide, "scale": {"fusion.7": 2.0}})
    t = by_op(v)
    assert t.loc["fusion.7", schema.Q_VALUE] <= 0.05
    assert t.loc["fusion.7", schema.VERDICT] == regress.REGRESSION
    step = t.loc[regress.STEP_TOTAL]
    assert step[schema.CHANGE] == pytest.approx(0.095, abs=0.01)  # +0.95 ms on 10 ms
    assert step[schema.VERDICT] == regress.REGRESSION and v.regressed
    assert step[schema.NOTE].startswith("carried by 1 op regression(s) adding 0.95 ms per step")
    assert "within its noise" in step[schema.NOTE]
    assert v.headline().startswith("REGRESSION: fusion.7;")


def test_every_op_slower_alike_is_inconclusive_not_a_regression(tmp_path):
    # All 40 ops 1.5x slower (a busier host looks the same): the step total is +50% and its own
    # test rejects, but no op moved against the others; with one op 3x on top, that op flags.
    ops = many_ops()
    uniform = {op[0]: 1.5 for op in ops}
    v = verdicts(tmp_path, base_kw={"ops": ops, "seed": 2},
                 cand_kw={"ops": ops, "scale": uniform, "seed": 1})
    step = by_op(v).loc[regress.STEP_TOTAL]
    assert step[schema.CHANGE] == pytest.approx(0.5, abs=0.02) and step[schema.P_VALUE] < 1e-3
    assert step[schema.VERDICT] == regress.INCONCLUSIVE
    assert "every op moved alike (median op +50%" in step[schema.NOTE]
    assert not v.regressed and v.headline().startswith("INCONCLUSIVE")
    v = verdicts(tmp_path / "ab", base_kw={"ops": ops, "seed": 2},
                 cand_kw={"ops": ops, "scale": dict(uniform, **{"fusion.3": 4.5}), "seed": 1})
    assert list(v.ops.loc[v.ops[schema.VERDICT] == regress.REGRESSION, schema.OP]) == ["fusion.3"]
    assert by_op(v).loc[regress.STEP_TOTAL, schema.NOTE].startswith("carried by 1 op")


def test_a_step_regression_no_op_explains_is_inconclusive():
    step = {schema.VERDICT: regress.REGRESSION, schema.NOTE: "", schema.EXPLANATION: "x"}
    quiet = pd.DataFrame({schema.VERDICT: [regress.NOISE, regress.UNCHANGED]})
    none = np.array([])
    out = regress.agree(quiet, step, none, none, tested=10)
    assert out[schema.VERDICT] == regress.INCONCLUSIVE and "no op is on its own" in out[schema.NOTE]
    # explained by an op regression or a new op, or too few ops tested to tell: kept
    for verdicts, tested in (([regress.REGRESSION], 10), ([regress.NEW], 10), ([], 3)):
        kept = regress.agree(pd.DataFrame({schema.VERDICT: verdicts, schema.DELTA_S: 1e-3}),
                              step, none, none, tested)
        assert kept[schema.VERDICT] == regress.REGRESSION


def test_a_quiet_op_is_judged_by_its_own_small_noise_among_noisy_ops(tmp_path):
    # 30 small ops wander 30% per step (10 steps: their medians move ~12% between runs by
    # chance alone); 10 ten-times-larger ops are steady to 1%. One steady op 30% slower (0.75
    # ms, beyond the step's noise) stands out: the noisy ops' chance moves explain the spread
    # of changes, so no between-run term hides it.
    noisy, quiet = many_ops(30), tuple(
        (f"steady.{i}", "fusion", "elementwise", "memory", "", 1, 2.5e-3, 1.25e-3)
        for i in range(10))
    ops = noisy + quiet
    rng = np.random.default_rng(11)

    def draws(scale_quiet0=1.0):
        return {op[0]: op[6] * np.exp((0.3 if op in noisy else 0.01) * rng.standard_normal(10))
                * (scale_quiet0 if op[0] == "steady.0" else 1.0) for op in ops}
    v = verdicts(tmp_path, base_kw={"ops": ops, "samples": draws()},
                 cand_kw={"ops": ops, "samples": draws(1.3)})
    t = by_op(v)
    assert t.loc["steady.0", schema.VERDICT] == regress.REGRESSION
    assert list(v.ops.loc[v.ops[schema.VERDICT] == regress.REGRESSION, schema.OP]) == ["steady.0"]
