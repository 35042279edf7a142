"""Summary figures that say what they are: the cost_analysis cross-check only where XLA's
analysis can check us, and MFU over the work the model must do (HFU >= MFU)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import report, schema
from harness.hlo import cross_check_skip
from harness.runs.pipeline import analyze_trace
from predictions import hardware
from workloads.llama import book as llama_book

FIXTURES = Path(__file__).parent / "fixtures" / "h100"
DOT = """HloModule m, is_scheduled=true

ENTRY %main (a: f32[8,16], b: f32[16,4]) -> f32[8,4] {
  %a = f32[8,16]{1,0} parameter(0)
  %b = f32[16,4]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,4]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_cross_check_runs_when_xla_reports_flops():
    assert cross_check_skip(DOT, {"flops": 2 * 8 * 16 * 4, "bytes accessed": 768.0}) == ""


@pytest.mark.parametrize(("cost_analysis", "reason"), [
    ({}, "not available"),
    ({"bytes accessed": 10.0}, "no 'flops'"),
    ({"flops": -1.0}, "flops=-1"),
])
def test_cross_check_is_omitted_with_its_reason(cost_analysis, reason):
    assert reason in cross_check_skip(DOT, cost_analysis)


def test_gpu_cost_analysis_leaves_cublas_out():
    # llama_train on the H100: XLA's cost analysis reports 1.0e11 FLOPs, the 16 cuBLAS calls
    # alone do far more; a ratio of the two (39.6 before) says nothing
    a = analyze_trace(FIXTURES / "llama_train-100m", chip="h100")
    assert "flops_vs_cost_analysis" not in a.summary
    assert any("custom-call" in n and "cross-check" in n for n in a.notes)


def test_matmul_whose_cost_analysis_is_minus_one():
    a = analyze_trace(FIXTURES / "matmul-B4096-8192x8192-bf16", chip="h100")
    assert "flops_vs_cost_analysis" not in a.summary
    assert any("flops=-1" in n for n in a.notes)


def test_hfu_is_at_least_mfu_for_the_train_step():
    # MFU counts 6 x matmul parameters x tokens + attention; the step's HLO does that work and
    # more (the embedding gather's backward, norms, softmax), so HFU >= MFU. The book's 6P
    # (input embedding included: 6 x 32768 x 768 x 8192 tokens more) would put MFU above HFU.
    meta = json.loads((FIXTURES / "llama_train-100m" / "meta.json").read_text())
    cfg = SimpleNamespace(**meta["config"])
    mesh = SimpleNamespace(shape=meta["mesh"])
    chip = hardware.chip("h100")
    est = llama_book.train(cfg, mesh, chip)
    a = analyze_trace(FIXTURES / "llama_train-100m", chip="h100")
    step_s, peak = a.summary[schema.STEP_S], chip.flops_per_s("bf16")
    mfu, mfu_book = (f / (step_s * peak) for f in (est.model_flops, est.book_flops))
    assert a.summary["hfu"] >= mfu
    assert mfu_book > a.summary["hfu"]
    assert est.book_flops - est.model_flops == pytest.approx(
        6 * (cfg.V * cfg.D + cfg.L * 2 * cfg.D + cfg.D) * cfg.B * cfg.T)


def test_report_names_the_mfu_formula_and_prints_the_books_beside_it():
    meta = json.loads((FIXTURES / "llama_train-100m" / "meta.json").read_text())
    cfg, mesh = SimpleNamespace(**meta["config"]), SimpleNamespace(shape=meta["mesh"])
    book = SimpleNamespace(estimate=lambda chip: (llama_book.train(cfg, mesh, chip), ""),
                           expected_collectives=lambda: None)
    a = analyze_trace(FIXTURES / "llama_train-100m", chip="h100", workload=book)
    s = a.summary
    assert "P_matmul" in s[schema.MFU_FORMULA]
    assert s["hfu"] >= s[schema.MFU] and s[schema.MFU_BOOK] > s[schema.MFU]
    text = report.render(a, "text")
    assert schema.MFU_BOOK in text and schema.MFU_FORMULA in text
