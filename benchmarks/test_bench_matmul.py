"""pytest-benchmark example: a sharded matmul timed by pytest-benchmark, profiled by the harness.

Case 3 of the book's sharding chapter (`sharding.md`): X[B, D_X] @ Y[D_X, F] -> Z[B, F] needs an
AllReduce_X of the partial sums. ``benchmark`` times the compiled step (wall clock, what
``--benchmark-compare`` compares); ``harness_run`` adds the per-op figures -- step time, roofline
efficiency when predictions are available, the slowest ops -- to ``extra_info``.

    python -m pytest benchmarks/test_bench_matmul.py --benchmark-enable --benchmark-autosave
    python -m pytest benchmarks/test_bench_matmul.py --benchmark-enable --benchmark-compare
    python -m pytest benchmarks/test_bench_matmul.py --harness-save results/nightly
"""
import pytest

from harness import schema


@pytest.mark.parametrize("case", ["no_comm", "allreduce"])
def test_sharded_matmul(benchmark, harness_run, case):
    run = harness_run("matmul", preset="tiny", overrides={"case": case}, mesh="4x2", steps=5)
    assert run.summary[schema.STEP_S] > 0
    assert benchmark.extra_info["harness_step_s"] == pytest.approx(run.summary[schema.STEP_S])
    if case == "allreduce":  # the trace shows the collective the layout calls for
        ops = set(run.ops[schema.OP])
        assert any(op.startswith("all-reduce") for op in ops), sorted(ops)
