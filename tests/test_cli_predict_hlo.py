"""harness predict-hlo: ahead-of-time compile in a child process, cost the HLO on chips."""
import json

import pytest

from harness import schema
from harness.cli import main
from harness.hlo import parse_module
from harness.plan.predict import predict_module

HLO = """HloModule jit_f, entry_computation_layout={(f32[128,256]{1,0}, f32[256,512]{1,0})->f32[128,512]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

ENTRY %main (p0: f32[128,256], p1: f32[256,512]) -> f32[128,512] {
  %p0 = f32[128,256]{1,0} parameter(0)
  %p1 = f32[256,512]{1,0} parameter(1)
  %dot.1 = f32[128,512]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %all-reduce.2 = f32[128,512]{1,0} all-reduce(%dot.1), replica_groups={{0,1,2,3}}, to_apply=%add
}
"""  # noqa: E501 (HLO as XLA prints it)


def test_predict_module_totals_are_sums_of_op_terms():
    pred = predict_module(parse_module(HLO), "tpu-v5p")
    ops = pred.ops.set_index(schema.OP)
    # roofline.md: the dot is 2*128*256*512 FLOPs at v5p's fp32 peak (the chip lists bf16 only,
    # so fp32 falls back to the bf16 peak) or its bytes over HBM, whichever is larger
    flops = 2 * 128 * 256 * 512
    nbytes = 4 * (128 * 256 + 256 * 512 + 128 * 512)
    assert ops.loc["dot.1", schema.FLOPS] == flops
    assert ops.loc["dot.1", schema.PREDICTED_S] == pytest.approx(max(flops / 4.59e14,
                                                                     nbytes / 2.8e12))
    assert pred.totals[schema.PREDICTED_OPS_S] == pytest.approx(ops[schema.PREDICTED_S].sum())
    assert pred.categories[schema.PREDICTED_S].sum() == pytest.approx(
        pred.totals[schema.PREDICTED_OPS_S])
    # the simulated step: the all-reduce is synchronous and needs the dot's result, so nothing
    # overlaps: step = dot + all-reduce, all of the all-reduce exposed
    assert pred.totals[schema.PREDICTED_STEP_S] == pytest.approx(
        ops.loc["dot.1", schema.PREDICTED_S] + ops.loc["all-reduce.2", schema.PREDICTED_S])
    assert ops.loc["all-reduce.2", schema.PREDICTED_S] > 0
    assert pred.totals[schema.PREDICTED_EXPOSED_COMM_S] == pytest.approx(
        ops.loc["all-reduce.2", schema.PREDICTED_S])
    assert pred.totals[schema.CRITICAL_COMM_S] == pred.totals[schema.PREDICTED_EXPOSED_COMM_S]
    assert pred.step.scheduled is False and schema.SIMULATED_FROM in pred.totals
    assert set(pred.categories[schema.CATEGORY]) == {"matmul", "collective"}


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_cli_compiles_tiny_train_step_on_16_devices(capsys):
    rc = main(["predict-hlo", "llama_train", "--mesh", "4x4", "--chip", "tpu-v5e",
               "--chip", "h100", "--format", "json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["chip"] for c in out["chips"]] == ["tpu-v5e", "h100"]
    for c in out["chips"]:
        totals = c["totals"]
        assert totals["predicted_step_s"] > 0 and totals["unmodeled_ops"] == 0
        # the schedule can only hide time: serial sum >= simulated step >= the core's compute
        assert totals["predicted_ops_s"] * (1 + 1e-9) >= totals["predicted_step_s"]
        assert totals["predicted_exposed_comm_s"] <= totals["predicted_comm_s"]
        assert totals["critical_compute_s"] + totals["critical_comm_s"] == pytest.approx(
            totals["predicted_step_s"])
        assert c["totals"]["analytic_s"] > 0
    assert abs(out["cross_check"]["flops_loops_once_rel_diff"]) < 0.02


def test_cli_unknown_chip_is_one_line(capsys):
    assert main(["predict-hlo", "llama_train", "--chip", "tpu-v9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "known chips" in err[0]


def test_a_slice_libtpu_cannot_build_is_one_line_before_any_compile(capsys, monkeypatch):
    # 9 v5p chips are laid as 3x3x1, whose axes of 3 are no multiple of a host's 2x2x1 chips
    from workloads import aot, tpu

    monkeypatch.setattr(tpu, "libtpu_available", lambda: True)
    monkeypatch.setattr(aot, "start_compile", lambda *a, **k: pytest.fail("compiled"))
    assert main(["predict-hlo", "llama_train", "--mesh", "3x3", "--chip", "tpu-v5p"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "v5p:3x3x1, which libtpu cannot build" in err
    assert "valid slices nearby: 8 (v5p:2x2x2), 12 (v5p:2x2x3) chips" in err
