"""matmul workload: every sharding case of the book's sharding chapter on 8 CPU devices.

Each case must give the unsharded NumPy product, and the compiled (post-SPMD) HLO must contain
exactly the collectives the book says the case needs (reference §4.1).
"""
import re
from collections import Counter

import numpy as np
import pytest

import workloads
from workloads import matmul
from workloads.mesh import make_mesh

COLLECTIVES = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"}
# "%name = <type> opcode(" -- the type may be a tuple "(f32[4], f32[4])"
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(", re.M)


def collective_counts(hlo_text: str) -> dict[str, int]:
    """Collective instructions by opcode; an async ``-start``/``-done`` pair counts once."""
    counts = Counter()
    for op in _INSTR.findall(hlo_text):
        if op.endswith("-done"):
            continue
        op = op.removesuffix("-start")
        if op in COLLECTIVES:
            counts[op] += 1
    return dict(counts)


def test_collective_counter_reads_hlo_lines():
    text = """
  %all-gather = f32[128,32]{0,1} all-gather(%wrapped_copy), channel_id=1, dimensions={1}
  %a2a = (f32[16]{0}, f32[16]{0}) all-to-all(%x, %y), channel_id=2
  %ars = f32[8]{0} all-reduce-start(%p), to_apply=%add
  %ard = f32[8]{0} all-reduce-done(%ars)
  ROOT %fusion = f32[16,32]{1,0} fusion(%param, %all-gather), kind=kCustom
"""
    assert collective_counts(text) == {"all-gather": 1, "all-to-all": 1, "all-reduce": 1}


@pytest.fixture(scope="module")
def mesh():
    return make_mesh("4x2")


def _run(case: str, mode: str, mesh):
    cfg = workloads.make_config("matmul", "tiny", {"case": case, "mode": mode})
    fn, args = matmul.build(cfg, mesh)
    x, y = matmul.operands(cfg)
    np.testing.assert_allclose(np.asarray(fn(*args)), x.astype(np.float64) @ y, rtol=1e-4,
                               atol=1e-4)
    return cfg, collective_counts(fn.lower(*args).compile().as_text())


# XLA:CPU has no ReduceScatterCreator pass (XLA:GPU has one): the SPMD partitioner's
# all-reduce + dynamic-slice stays as it is, so the automatic reduce_scatter case differs from
# the book on CPU. Pinned separately below; strict so a fixed XLA shows up.
_CPU_AUTO_RS = pytest.mark.xfail(strict=True, reason="XLA:CPU lowers ReduceScatter as all-reduce")


@pytest.mark.parametrize("mode", matmul.MODES)
@pytest.mark.parametrize("case", list(matmul.CASES))
def test_case_matches_numpy_and_book_collectives(case, mode, mesh, request):
    if case == "reduce_scatter" and mode == "auto":
        request.applymarker(_CPU_AUTO_RS)
    cfg, counts = _run(case, mode, mesh)
    assert counts == workloads.get("matmul").expected_collectives(cfg, mesh)


def test_book_collectives_per_case():
    # reference §4.1, written out independently of the CASES table
    book = {"no_comm": {}, "allgather": {"all-gather": 1}, "allreduce": {"all-reduce": 1},
            "reduce_scatter": {"reduce-scatter": 1}, "same_axis": {"all-gather": 1},
            "same_axis_gather_x": {"all-gather": 1}}
    assert set(book) == set(matmul.CASES)
    for case, expected in book.items():
        assert matmul.expected_collectives(matmul.MatmulConfig(case=case)) == expected


def test_auto_reduce_scatter_on_cpu_is_all_reduce(mesh):
    _, counts = _run("reduce_scatter", "auto", mesh)
    assert counts == {"all-reduce": 1}


def test_explicit_specs_run_and_make_no_claim(mesh):
    cfg = workloads.make_config("matmul", "tiny",
                                {"x_spec": "X+Y,-", "y_spec": "-,-", "z_spec": "X+Y,-"})
    fn, args = matmul.build(cfg, mesh)
    x, y = matmul.operands(cfg)
    np.testing.assert_allclose(np.asarray(fn(*args)), x.astype(np.float64) @ y, rtol=1e-4,
                               atol=1e-4)
    assert matmul.expected_collectives(cfg, mesh) is None
    assert collective_counts(fn.lower(*args).compile().as_text()) == {}


def test_bf16_and_abstract_build(mesh):
    cfg = workloads.make_config("matmul", "tiny", {"dtype": "bf16", "case": "allreduce"})
    fn, args = matmul.build(cfg, mesh, abstract=True)
    assert [a.shape for a in args] == [(cfg.B, cfg.D), (cfg.D, cfg.F)]
    assert all(str(a.dtype) == "bfloat16" for a in args)
    assert collective_counts(fn.lower(*args).compile().as_text()) == {"all-reduce": 1}


def test_indivisible_dim_names_the_axis(mesh):
    cfg = workloads.make_config("matmul", "tiny", {"D": "130", "case": "allgather"})
    with pytest.raises(workloads.WorkloadError, match=r"D=130 .*mesh axis X of size 4") as e:
        matmul.build(cfg, mesh)
    assert "\n" not in str(e.value)


def test_trips_repeat_the_product_in_one_program():
    """``trips=N``: the product summed over N trips of a loop whose trip count is an input
    value, so 2 and 3 trips compile to one program (one HLO) doing 2x and 3x the work; no trip
    adds a collective the case does not call for."""
    mesh = make_mesh((4, 2), ("X", "Y"))
    texts, outs = [], []
    for n in (2, 3):
        cfg = matmul.MatmulConfig(B=64, D=128, F=64, case="no_comm", trips=n)
        fn, args = matmul.build(cfg, mesh)
        texts.append(fn.lower(*args).compile().as_text())
        outs.append(np.asarray(fn(*args), np.float64))
        x, y = matmul.operands(cfg)
        np.testing.assert_allclose(outs[-1], n * (x.astype(np.float64) @ y), rtol=1e-4,
                                   atol=1e-3)
    from harness.capture.environment import fingerprint  # the HLO's, metadata left out

    assert fingerprint(texts[0]) == fingerprint(texts[1])
    assert collective_counts(texts[0]) == {}
    assert matmul.book(matmul.MatmulConfig(B=64, D=128, F=64, trips=3), mesh, None).model_flops \
        == 2 * 64 * 128 * 64 * 3
    with pytest.raises(workloads.base.WorkloadError, match="trips must be >= 0"):
        matmul.MatmulConfig(trips=-1)
