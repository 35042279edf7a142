"""One verdict per pair, and the layouts' headline agrees with it (issue 57, part 2): a changed
program that adds collectives is named as the cause whatever the noise of one run a side; where
its slowdown is within that noise the verdict is inconclusive and the headline says "measured
... within the noise" and how to decide, never "OK" beside "B is slower". Hand-made runs with
known step objects (expected values by arithmetic)."""
import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.record import Run
from harness.regress import judge

LAYERS = 4  # B's all-reduces: one per layer, none in A
Z = np.linspace(-1.0, 1.0, 10)


def _run(fingerprint: str, compute_s: float, exposed_s: float, spread: float) -> Run:
    """A 4-layer MLP's run: one matmul per layer, and in B an all-reduce after each (all of it
    exposed); its traced steps ``compute + exposed`` x (1 + ``spread`` x Z)."""
    step = compute_s + exposed_s
    n = LAYERS if exposed_s else 0
    ops = pd.DataFrame({
        schema.PROGRAM: "jit_mlp",
        schema.OP: [f"fusion.{i}" for i in range(LAYERS)] + [f"all-reduce.{i}" for i in range(n)],
        schema.CATEGORY: [schema.CAT_MATMUL] * LAYERS + [schema.CAT_COLLECTIVE] * n,
        schema.COUNT: 1.0,
        schema.MEASURED_S: [compute_s / LAYERS] * LAYERS + [exposed_s / LAYERS] * n,
        schema.PREDICTED_S: [compute_s / LAYERS / 2] * LAYERS + [exposed_s / LAYERS / 4] * n,
        schema.FLOPS: [1e9] * LAYERS + [0.0] * n, schema.HBM_BYTES: 1e6,
        schema.COMM_BYTES: [0.0] * LAYERS + [5e5] * n,
        schema.BOUND: ["compute"] * LAYERS + ["comm"] * n,
        schema.COLLECTIVE: [""] * LAYERS + ["all-reduce"] * n, schema.GROUP_SIZE: [1] * LAYERS
        + [4] * n, schema.SOURCE_OP: "jit(mlp)/dot_general"})
    ops[schema.EFFICIENCY] = ops[schema.PREDICTED_S] / ops[schema.MEASURED_S]
    coll = [{schema.OP: f"all-reduce.{i}", schema.COMM_S: exposed_s / LAYERS,
             schema.EXPOSED_COMM_S: exposed_s / LAYERS} for i in range(n)]
    return Run(meta={schema.HLO_FINGERPRINTS: {"jit_mlp": fingerprint},
                     schema.MESH: {"X": 4, "Y": 2},
                     schema.TRACED_STEP_TIMES_S: list(step * (1 + spread * Z))},
               ops=ops, step={schema.STEP_S: step, schema.COMPUTE_S: compute_s,
                              schema.EXPOSED_COMM_S: exposed_s, schema.IDLE_S: 0.0,
                              schema.STEP_COLLECTIVES: coll})


def _pair(spread: float):
    """A: 20 ms of compute; B: the same compute and 4 ms of exposed all-reduces: 1.2x."""
    return _run("a", 20e-3, 0.0, spread), _run("b", 20e-3, 4e-3, spread)


def test_added_collectives_within_the_noise_are_inconclusive_and_the_headline_says_so():
    # each side's traced steps spread +-60%: the median's s.e. alone is 1.2533 x 1.4826 x
    # MAD(log) / sqrt(10), with MAD(log) ~ 0.3: ~0.18 a side, so log(1.2) = 0.18 is ~0.7 s.e.
    a, b = _pair(0.6)
    v = judge.compare(a, b, layouts_first=True)
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.PROGRAM)
    assert v.p_value > 0.01 and v.change == pytest.approx(0.2)
    head = "B measured 1.2x slower than A, within the noise of one run a side (step 20 ms -> 24 ms)"
    assert v.layouts.headline.startswith(head) and v.message.startswith(head)
    assert "B is " not in v.message and "OK" not in v.message.upper().split()
    # the cause whatever the noise: the 4 all-reduces B adds and their 4 ms exposed
    assert f". The program changed: +{LAYERS} all-reduces, +4 ms exposed (" in v.message
    assert "measured 1.2x slower, within the noise of one run a side" in v.message
    assert "harness sweep --repeat 3" in v.message and "--confirm 3" in v.message


def test_added_collectives_beyond_the_noise_are_a_regression_of_the_program():
    a, b = _pair(0.01)  # steps +-1%: 1.2x is far beyond the constant 0.05 of each run
    v = judge.compare(a, b, layouts_first=True)
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.PROGRAM)
    assert v.message.startswith("B is 1.2x slower than A (step 20 ms -> 24 ms)")
    assert f". Slower: the program changed: +{LAYERS} all-reduces, +4 ms exposed (" in v.message


def test_a_faster_candidate_within_the_noise_is_ok_and_said_measured():
    a, b = _pair(0.6)
    v = judge.compare(b, a, layouts_first=True)  # B is the one without the all-reduces
    assert (v.verdict, v.cause) == (judge.OK, judge.PROGRAM)
    assert v.message.startswith("A measured 1.2x slower than B, within the noise of one run a "
                                "side (step 24 ms -> 20 ms)")


def test_a_faster_candidate_beyond_the_noise_is_an_improvement_said_plainly():
    a, b = _pair(0.01)
    v = judge.compare(b, a, layouts_first=True)
    assert v.verdict == judge.IMPROVEMENT
    assert v.message.startswith("A is 1.2x slower than B (step 24 ms -> 20 ms)")


def test_never_ok_beside_slower():
    """Over slowdowns and spreads, the verdict and the headline agree: "B is ... slower" only
    beside a regression (or a host that explains it), "measured" beside anything else."""
    for spread in (0.01, 0.2, 0.6):
        for exposed in (0.5e-3, 2e-3, 4e-3, 10e-3):
            v = judge.compare(_run("a", 20e-3, 0.0, spread), _run("b", 20e-3, exposed, spread),
                              layouts_first=True)
            if v.message.startswith("B is "):
                assert v.verdict == judge.REGRESSION, v.message
            else:
                assert v.verdict != judge.REGRESSION, v.message
            if v.verdict == judge.OK:
                assert " slower than " not in v.message.split(". ")[0] or "measured" in \
                    v.message.split(". ")[0], v.message


def test_the_same_program_measured_slower_within_its_noise_says_how_to_decide():
    """One program, 1.2x measured with steps spread +-50%: ok (the rule's), and the line says
    it was measured slower within the noise, and how to decide."""
    from test_regress_judge import make

    v = judge.compare(make(spread=0.5), make(12.0, cpu=1.2, spread=0.5))
    assert (v.verdict, v.cause) == (judge.OK, judge.NOISE)
    assert "measured 1.2x slower, within the noise of one run a side: to decide" in v.message
