"""harness.runs.history: a candidate judged against several baseline runs, each op by its own
run-to-run spread; and noise.moderated_variance, the shrinkage behind it."""
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import digamma
from test_cli_compare import run_cli
from test_runs_regress import META, by_op, frames, many_ops, save

from harness import schema
from harness.errors import HarnessError
from harness.runs import noise, regress
from harness.runs.history import History
from harness.runs.run import Run

OPS = many_ops(40)        # 40 equal elementwise ops, 2.5% of the step each
JUMPY = {op[0] for op in OPS[::2]}  # fusion.0, .2, ...: 25% between runs; the others 2%


def drawn_run(root: Path, name: str, rng, scale=None) -> Run:
    """One run: each op's run offset exp(sigma N(0,1)) (sigma 0.25 jumpy, 0.02 steady), its 10
    steps 1% apart, times ``scale`` per op."""
    samples = {}
    for op, *_, t, _pred in OPS:
        sigma = 0.25 if op in JUMPY else 0.02
        samples[op] = (t * math.exp(sigma * rng.standard_normal())
                       * (1 + 0.01 * rng.standard_normal(10)) * (scale or {}).get(op, 1.0))
    ops, steps = frames(ops=OPS, samples=samples)
    return Run.load(Run(meta=META, ops=ops, steps=steps).save(root / name))


def test_each_op_is_judged_by_its_own_spread(tmp_path):
    """Eight baselines show fusion.1 moving 2% between runs and fusion.0 25%. Both 30% slower
    in the candidate: ln 1.3 = 0.26 is 0.26 / (0.019 x sqrt(1 + 1/8)) = 13 of fusion.1's sigmas
    (1.5% over these eight runs, 1.9% once moderated towards the ops' common spread) but about
    one of fusion.0's. So fusion.1 alone flags. Against the newest baseline alone, one
    between-run term for every op (about 9%, the robust spread of a mix of 2.8% and 35%
    changes) cannot tell them apart."""
    rng = np.random.default_rng(0)
    base = [drawn_run(tmp_path, f"b{i}", rng) for i in range(8)]
    cand = drawn_run(tmp_path, "cand", rng, {"fusion.0": 1.3, "fusion.1": 1.3})
    v = regress.compare_runs(base, cand)
    assert list(v.ops.loc[v.ops[schema.VERDICT] == regress.REGRESSION, schema.OP]) == ["fusion.1"]
    assert v.regressed and v.baselines == 8 and v.baseline == "8 runs (b0 .. b7)"
    assert "over 8 baseline runs" in v.headline()
    # the median op's moderated spread lies between the two kinds' own (2% and 25%)
    assert 0.02 < v.run_to_run < 0.25
    one = by_op(regress.compare_runs(base[-1], cand))
    assert one.loc["fusion.1", schema.VERDICT] != regress.REGRESSION
    # Identical code against the same history: five fresh candidates, no regression.
    for i in range(5):
        assert not regress.compare_runs(base, drawn_run(tmp_path, f"aa{i}", rng)).regressed


def test_pooled_baseline_takes_each_run_back_by_its_drift(tmp_path):
    """Three runs identical but for a host 1.0x, 1.2x, 0.9x as slow throughout (no jitter):
    drift_k = ln f_k - mean(ln f); each op's pooled time is its time x (1.2 x 0.9)^(1/3), and
    every one of the 30 pooled steps holds exactly that."""
    f = [1.0, 1.2, 0.9]
    runs = []
    for k, fk in enumerate(f):
        ops, steps = frames(jitter=0.0, ops=OPS, scale={op[0]: fk for op in OPS})
        runs.append(Run.load(Run(meta=META, ops=ops, steps=steps).save(tmp_path / f"r{k}")))
    h = History.of(runs)
    assert h.drift == pytest.approx(np.log(f) - np.log(f).mean())
    pooled = h.pooled()
    g = (1.2 * 0.9) ** (1 / 3)
    row = pooled.ops.set_index(schema.OP).loc["fusion.3"]
    assert row[schema.MEASURED_S] == pytest.approx(OPS[3][6] * g)
    assert row[schema.EFFICIENCY] == pytest.approx(OPS[3][7] / (OPS[3][6] * g))
    s = pooled.steps[pooled.steps[schema.OP] == "fusion.3"]
    assert len(s) == 30 and s[schema.STEP].nunique() == 30
    assert s[schema.MEASURED_S].to_numpy() == pytest.approx(OPS[3][6] * g)


def test_an_op_missing_from_a_baseline_run_is_still_judged(tmp_path):
    rng = np.random.default_rng(3)
    base = [drawn_run(tmp_path, f"b{i}", rng) for i in range(4)]
    base[1].ops = base[1].ops[base[1].ops[schema.OP] != "fusion.5"]
    base[1].steps = base[1].steps[base[1].steps[schema.OP] != "fusion.5"]
    v = by_op(regress.compare_runs(base, drawn_run(tmp_path, "cand", rng, {"fusion.5": 2.0})))
    assert v.loc["fusion.5", schema.VERDICT] == regress.REGRESSION  # 3 runs have it: 2 df


def test_a_history_needs_two_runs(tmp_path):
    with pytest.raises(HarnessError, match="at least 2 runs, got 1"):
        History.of([Run.load(save(tmp_path, "only"))])


def test_moderated_variances_recover_the_prior_they_were_drawn_from():
    """Op variances drawn as s0^2 d0 / chi2(d0) with s0^2 = 0.02 and d0 = 6, each seen through
    4 degrees of freedom: the estimate finds d0 near 6 and gives an op with no variance of its
    own s0^2 on d0 degrees of freedom."""
    rng = np.random.default_rng(1)
    true = 0.02 * 6 / rng.chisquare(6, size=20000)
    s2 = true * rng.chisquare(4, size=20000) / 4
    s2[0] = np.nan
    d = np.r_[0, np.full(19999, 4)]
    mod, df = noise.moderated_variance(s2, d)
    assert df[0] == pytest.approx(6, rel=0.1) and df[1] == pytest.approx(df[0] + 4)
    assert mod[0] == pytest.approx(0.02, rel=0.05)
    # s~^2 is the df-weighted mean of the prior and the op's own
    assert mod[1] == pytest.approx((df[0] * mod[0] + 4 * s2[1]) / df[1])


def test_equal_variances_get_the_common_value_and_few_are_left_alone():
    """Variances that spread no more than chance (all equal: less) give d0 = MAX_PRIOR_DF and
    s0^2 = c x exp(ln 2 - digamma(2)) = c x 2 e^(gamma - 1): equal sample variances on 4 df
    sit below their variance by E[ln chi2(4) / 4] = digamma(2) - ln 2."""
    mod, df = noise.moderated_variance(np.full(10, 0.01), np.full(10, 4))
    assert df == pytest.approx(noise.MAX_PRIOR_DF + 4)
    assert mod == pytest.approx(0.01 * math.exp(math.log(2) - digamma(2)), rel=1e-4)
    assert mod == pytest.approx(0.01 * 2 * math.exp(np.euler_gamma - 1), rel=1e-4)
    few, d = noise.moderated_variance(np.array([0.01, 0.04]), np.array([4, 4]))
    assert few.tolist() == [0.01, 0.04] and d.tolist() == [4, 4]


def test_cli_takes_several_baselines_oldest_first(tmp_path, capsys):
    rng = np.random.default_rng(0)
    base = [drawn_run(tmp_path, f"b{i}", rng) for i in range(8)]
    cand = drawn_run(tmp_path, "cand", rng, {"fusion.0": 1.3, "fusion.1": 1.3})
    code, out, _ = run_cli(capsys, *(r.path for r in base), cand.path)
    assert code == 1
    assert out.splitlines()[0] == "harness compare: 8 runs (b0 .. b7) -> cand"
    assert out.strip().splitlines()[-1].startswith("REGRESSION: fusion.1;")
    code, out, _ = run_cli(capsys, *(r.path for r in base), tmp_path / "missing")
    assert code == 2
