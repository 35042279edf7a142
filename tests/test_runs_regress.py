"""harness.runs.regress: noise-aware verdicts on small synthetic runs (a few ops, 10 steps each)."""
import math

import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.errors import HarnessError
from harness.runs import regress, store

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
    return store.save(root / name, meta, ops, steps=None if no_steps else steps)


def verdicts(tmp_path, base_kw=None, cand_kw=None, **rule):
    b = store.load(save(tmp_path, "base", **(base_kw or {})))
    c = store.load(save(tmp_path, "cand", **(cand_kw or {})))
    return regress.compare_runs(b, c, **rule)


def by_op(v) -> pd.DataFrame:
    return v.table().set_index(schema.OP)


def test_identical_runs_are_unchanged(tmp_path):
    v = verdicts(tmp_path)
    t = by_op(v)
    assert set(t[schema.VERDICT]) == {regress.UNCHANGED}
    assert (t[schema.CHANGE] == 0.0).all()
    assert (t[schema.P_VALUE] == 1.0).all()  # the same samples: U = n*m/2, nothing to reject
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


def test_too_few_steps_flag_only_huge_changes(tmp_path):
    # 3 vs 3 steps: the test cannot reach p <= 0.05 (2/20 = 0.1), so it is skipped.
    v = verdicts(tmp_path, base_kw={"steps": 3},
                 cand_kw={"steps": 3, "scale": {"fusion.12": 2.0, "all-reduce.3": 1.3}})
    t = by_op(v)
    assert math.isnan(t.loc["fusion.12", schema.P_VALUE])
    assert t.loc["fusion.12", schema.VERDICT] == regress.REGRESSION  # +100% > 50%
    assert "too few steps to test (3 vs 3)" in t.loc["fusion.12", schema.NOTE]
    assert "untested" in t.loc["fusion.12", schema.EXPLANATION]
    assert t.loc["all-reduce.3", schema.VERDICT] == regress.NOISE  # +30% < 50%


def test_runs_without_step_samples_warn_and_fall_back(tmp_path):
    v = verdicts(tmp_path, base_kw={"no_steps": True},
                 cand_kw={"no_steps": True, "scale": {"fusion.12": 2.0, "fusion.7": 1.2}})
    t = by_op(v)
    assert t.loc["fusion.12", schema.VERDICT] == regress.REGRESSION
    assert t.loc["fusion.7", schema.VERDICT] == regress.NOISE
    assert sum("no per-step samples" in w for w in v.warnings) == 2
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
    b = store.load(save(tmp_path, "base"))
    c = store.load(save(tmp_path, "cand", {"all-reduce.3": 2.0},
                        meta=dict(META, mesh={"X": 2, "Y": 2})))
    v = regress.compare_runs(b, c)
    assert len(v.warnings) == 1 and "mesh" in v.warnings[0]
    assert len(v.ops) == len(OPS)
    # No single axis of the 2x2 mesh has 4 devices: the group is named by its size only.
    assert "all-reduce.3 (all-reduce over 4 devices, communication-bound)" in \
        by_op(v).loc["all-reduce.3", schema.EXPLANATION]


@pytest.mark.parametrize("rule", [{"alpha": 0.0}, {"alpha": 1.5}, {"threshold": -0.1},
                                  {"min_share": 1.0}, {"threshold": float("nan")}])
def test_bad_rule_names_the_knob(rule):
    with pytest.raises(HarnessError, match=next(iter(rule))):
        regress.Rule(**rule)


def test_ops_table_without_needed_columns_is_rejected(tmp_path):
    ops, steps = frames()
    path = store.save(tmp_path / "bad", META, ops.drop(columns=[schema.MEASURED_S]), steps=steps)
    good = store.load(save(tmp_path, "good"))
    with pytest.raises(HarnessError, match=schema.MEASURED_S):
        regress.compare_runs(good, store.load(path))
