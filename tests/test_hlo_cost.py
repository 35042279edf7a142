"""Per-op costs from HLO, and module totals against XLA's ``compiled.cost_analysis()``.

Expected numbers are arithmetic on the per-device shapes (`profiling.md`: shapes in compiled HLO
are per device; a dot is 2 x M x N x K FLOPs; a fusion reads its operands and writes its result
once). ``.cost.json`` beside each captured fixture holds what ``cost_analysis()`` said for it.
"""
from __future__ import annotations

import importlib.util
import json
import math

import pytest
from conftest import FIXTURES

from harness import hlo, schema
from predictions import roofline
from predictions.rules import OpDesc, Shape

CAPTURED = ["matmul_allreduce_mesh", "matmul_allreduce_groups", "matmul_allgather",
            "matmul_reducescatter", "shardmap_ag_rs", "shardmap_permute_a2a", "fori_loop", "scan",
            "mlp_train"]
# Loops: (trip count, FLOPs of the dot in one iteration), per device.
LOOPS = {"fori_loop": (5, 2 * 128 * 256 * 256), "scan": (6, 2 * 64 * 128 * 128)}
F32, BF16 = 4, 2


def load(name: str) -> hlo.Module:
    return hlo.parse_module((FIXTURES / f"{name}.txt").read_text())


def desc(m: hlo.Module, name: str) -> OpDesc:
    return hlo.to_desc(m.instruction(name), m)


def row(df, op: str):
    rows = df[df[schema.OP] == op]
    assert len(rows) == 1, f"{op}: {len(rows)} rows"
    return rows.iloc[0]


# --- descriptions -----------------------------------------------------------------------------
def test_dot_desc_is_per_device():
    m = load("matmul_allreduce_mesh")
    assert desc(m, "dot.1") == OpDesc(
        "dot", (Shape("f32", (256, 256)),), (Shape("f32", (256, 128)), Shape("f32", (128, 256))),
        lhs_contracting=(1,), rhs_contracting=(0,))


@pytest.mark.parametrize("fixture, op, axes", [
    ("matmul_allreduce_mesh", "all-reduce", (4,)),  # mesh form: axis_1 = 4
    ("matmul_allreduce_groups", "all-reduce", (4,)),  # {{0,2,4,6},{1,3,5,7}}
    ("mlp_train", "all-reduce.3", (8,)),  # mesh axis_0 = 8
    ("shardmap_permute_a2a", "ppermute.3", (8,)),  # ring over 8 devices
    ("tpu_style", "all-gather-start", (8,)),  # [1,8]<=[8]
    ("tpu_style", "all-reduce-start", (4,)),  # [2,4]<=[8]
    ("tpu_style", "reduce-scatter.1", (2,)),  # [4,2]<=[2,4]T(1,0)
    ("tpu_style", "collective-permute-start", (4,)),  # pairs over devices 0..3
    ("gpu_style", "all-gather-start", (8,)),  # replica_groups={} = all 8 partitions
    ("gpu_style", "all-reduce-start", (2,)),  # sub-axis x:(1)2
    ("bare_style", "crs", (2,)),  # mesh axis_1 = 2
])
def test_collective_group_axes(fixture, op, axes):
    assert desc(load(fixture), op).group_axes == axes


def test_async_start_takes_the_done_result():
    m = load("tpu_style")
    ag = desc(m, "all-gather-start")
    assert (ag.opcode, ag.results, ag.operands) == (
        "all-gather", (Shape("bf16", (256, 512)),), (Shape("bf16", (32, 512)),))
    cp = desc(m, "collective-permute-start")  # result tuple also holds context u32[] scalars
    assert (cp.opcode, cp.results) == ("collective-permute", (Shape("bf16", (64, 128)),))
    assert desc(m, "copy-start").results == (Shape("bf16", (256, 512)),)
    wrapped = desc(load("gpu_style"), "all-gather-start")  # generic async-start
    assert (wrapped.opcode, wrapped.results) == ("all-gather", (Shape("f32", (1024, 512)),))


def test_gemm_custom_call_and_convolution_descs():
    m = load("gpu_style")
    gemm = desc(m, "custom-call.1")
    assert gemm == OpDesc("dot", (Shape("f32", (128, 512)),),
                          (Shape("f32", (128, 256)), Shape("f32", (256, 512))), (1,), (0,))
    conv = desc(m, "convolution.4")  # b01f_01io->b01f: the kernel contracts i and the window
    # 3x3 window, pad 1 on 32x32: per spatial dim 32*3 - 2 (border) positions meet input data
    assert conv.opcode == "convolution" and conv.rhs_contracting == (2,)
    assert conv.window_positions == pytest.approx((94 / 32) ** 2)


def test_fusion_reads_only_slices_and_writes_updates_in_place():
    m = load("scan")
    ds = desc(m, "dynamic-slice_bitcast_fusion")  # reads row i of ws[6,128,128]
    assert ds.operands == (Shape("f32", (1, 128, 128)), Shape("s32", ()))
    dus = desc(m, "bitcast_dynamic-update-slice_fusion")  # writes row i of ys[6,64,128]
    assert dus.results == (Shape("f32", (1, 64, 128)),)
    assert dus.operands == (Shape("s32", ()), Shape("f32", (64, 128)))


# libtpu's shape of a scanned layer's matmul (llama_decode 8b on v5e 4x2: fused_computation.9):
# a kOutput fusion taking the whole stacked weight, whose nested kLoop fusion slices layer i
# out of it for the convolution; smaller here, L = 32 layers of [256, 128]
NESTED_SLICE = """HloModule scan_matmul, is_scheduled=true

%slice_layer (p0: bf16[32,256,128], p1: s32[]) -> bf16[256,128] {
  %p0 = bf16[32,256,128]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = bf16[1,256,128]{2,1,0} dynamic-slice(%p0, %p1, %z, %z), dynamic_slice_sizes={1,256,128}
  ROOT %b = bf16[256,128]{1,0} bitcast(%ds)
}

%matmul (q0: bf16[32,256,128], q1: s32[], q2: bf16[8,256]) -> bf16[8,128] {
  %q2 = bf16[8,256]{1,0} parameter(2)
  %q0 = bf16[32,256,128]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %w = bf16[256,128]{1,0} fusion(%q0, %q1), kind=kLoop, calls=%slice_layer
  ROOT %c = bf16[8,128]{1,0} convolution(%q2, %w), dim_labels=bf_io->bf
}

ENTRY %e (ws: bf16[32,256,128], i: s32[], x: bf16[8,256]) -> bf16[8,128] {
  %ws = bf16[32,256,128]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %x = bf16[8,256]{1,0} parameter(2)
  ROOT %f = bf16[8,128]{1,0} fusion(%ws, %i, %x), kind=kOutput, calls=%matmul
}
"""


def test_a_nested_fusion_that_slices_one_layer_reads_that_layer():
    """The stacked weight is read one layer at a time, 256 x 128 of its 32 x 256 x 128
    elements (1/L), not whole: L times fewer bytes than the operand's."""
    m = hlo.parse_module(NESTED_SLICE)
    f = desc(m, "f")
    assert f.operands == (Shape("bf16", (256 * 128,)), Shape("s32", ()), Shape("bf16", (8, 256)))
    row_f = row(hlo.hlo_costs(NESTED_SLICE, "tpu-v5e"), "f")
    assert row_f[schema.HBM_BYTES] == 2 * (256 * 128 + 8 * 256 + 8 * 128) + 4


def test_dimension_numbers_out_of_range_are_parse_errors():
    bad = (FIXTURES / "matmul_allreduce_mesh.txt").read_text().replace(
        "lhs_contracting_dims={1}", "lhs_contracting_dims={7}")
    m = hlo.parse_module(bad)
    with pytest.raises(hlo.HloParseError, match="lhs_contracting_dims"):
        hlo.to_desc(m.instruction("dot.1"), m)


# --- the predicted OPS table ------------------------------------------------------------------
def test_table_columns_and_rows():
    df = hlo.hlo_costs((FIXTURES / "mlp_train.txt").read_text(), "cpu")
    assert list(df.columns) == [*schema.OPS_PREDICTED, schema.SOURCE_OP, schema.SOURCE_LINE,
                                schema.RATE]
    # each op's JAX operation, from its metadata: the MLP's matmuls are dot_generals
    dots = df[df[schema.OPCODE] == "dot"]
    assert len(dots) and dots[schema.SOURCE_OP].str.endswith("dot_general").all()
    # the shipped cpu placeholder has no kernel rates: a compute-bound dot at its one peak
    compute = dots[dots[schema.BOUND] == "compute"]
    assert len(compute) and (compute[schema.RATE] == "generic fp32").all()
    assert set(df[schema.PROGRAM]) == {"jit_loss"}
    assert not set(df[schema.OPCODE]) & {"parameter", "constant", "tuple", "get-tuple-element",
                                         "bitcast"}
    assert set(df[schema.CATEGORY]) <= set(schema.CATEGORIES)
    # 24 entry instructions less 3 parameters, 2 constants, 3 get-tuple-elements, 2 bitcasts
    # and the root tuple
    assert len(df) == 24 - (3 + 2 + 3 + 2 + 1) and df[schema.OP].is_unique


def test_matmul_and_collective_costs():
    df = hlo.hlo_costs(load("matmul_allreduce_mesh"), "cpu")
    dot = row(df, "ynn_fusion")
    assert dot[schema.FLOPS] == 2 * 256 * 128 * 256
    assert dot[schema.HBM_BYTES] == F32 * (256 * 128 + 128 * 256 + 256 * 256)
    assert dot[schema.CATEGORY] == "matmul"
    ar = row(df, "all-reduce")
    assert ar[schema.COLLECTIVE] == "all-reduce" and ar[schema.GROUP_SIZE] == 4
    assert ar[schema.COMM_BYTES] == F32 * 256 * 256  # sharding.md: V = the reduced array
    ag = row(hlo.hlo_costs(load("matmul_allgather"), "cpu"), "all-gather")
    assert ag[schema.COMM_BYTES] == F32 * 256 * 512  # V = the gathered output
    assert ag[schema.GROUP_SIZE] == 8


def test_tpu_fusions_and_async_collectives():
    df = hlo.hlo_costs(load("tpu_style"), "tpu-v5p")
    mm = row(df, "fusion")  # convolution-as-dot + convert, bf16
    assert mm[schema.FLOPS] == pytest.approx(2 * 256 * 1024 * 512, rel=1e-3)
    assert mm[schema.HBM_BYTES] == BF16 * (256 * 1024 + 1024 * 512 + 256 * 512)
    rs = row(df, "fusion.3")  # calls=%all-reduce-scatter.3: the collective rides the fusion
    assert (rs[schema.COLLECTIVE], rs[schema.GROUP_SIZE]) == ("reduce-scatter", 2)
    assert rs[schema.COMM_BYTES] == BF16 * 32 * 32 * 8192  # V = the unreduced input
    for done in ("all-gather-done", "all-reduce-done", "collective-permute-done", "copy-done"):
        assert row(df, done)[schema.PREDICTED_S] == 0  # the -start carries the cost
    assert row(df, "all-gather-start")[schema.COMM_BYTES] == BF16 * 256 * 512
    assert row(df, "custom-call.5")[schema.BOUND] == schema.UNMODELED
    assert row(df, "fusion.24")[schema.COUNT] == 4


def test_gpu_gemm_convolution_and_attention_costs():
    df = hlo.hlo_costs(load("gpu_style"), "h100")
    gemm = row(df, "custom-call.1")
    assert gemm[schema.FLOPS] == 2 * 128 * 256 * 512
    assert gemm[schema.HBM_BYTES] == F32 * (128 * 256 + 256 * 512 + 128 * 512)  # no workspace
    # 2 x (batch x out features x in features) x valid (output, kernel) position pairs per
    # spatial dim, 32*3 - 2 with pad 1 (XLA's HloCostAnalysis counts the same)
    assert row(df, "convolution.4")[schema.FLOPS] == 2 * (8 * 64 * 16) * (94 * 94)
    attn = row(df, "fusion.7")
    assert attn[schema.FLOPS] == pytest.approx(2 * 128 * 64 * 128, rel=0.01)
    assert attn[schema.HBM_BYTES] == F32 * (128 * 64 + 64 * 128 + 128 * 128)


def test_counts_multiply_times_but_not_per_execution_costs():
    m = load("fori_loop")
    df = hlo.hlo_costs(m, "cpu")
    dot = row(df, "ynn_fusion")
    assert dot[schema.COUNT] == 5 and dot[schema.FLOPS] == 2 * 128 * 256 * 256
    cost = hlo.instruction_cost(m.instruction("ynn_fusion"), m)
    once = roofline.op_time(cost, "cpu", "f32")
    assert dot[schema.PREDICTED_S] == pytest.approx(5 * once.predicted_s)
    assert dot[schema.T_COMPUTE_S] == pytest.approx(5 * once.t_compute_s)


def test_the_chips_per_op_overhead_is_paid_once_per_execution():
    import dataclasses

    from predictions import hardware

    base = dataclasses.replace(hardware.CHIPS["cpu"], op_overhead_s=0.0)
    chip = dataclasses.replace(base, op_overhead_s=1e-3)  # far above any term below
    m = load("fori_loop")
    plain, slow = (hlo.hlo_costs(m, c).set_index(schema.OP) for c in (base, chip))
    # the dot runs 5 times a step: 5 x (its roofline time + 1 ms)
    assert slow.loc["ynn_fusion", schema.PREDICTED_S] == pytest.approx(
        plain.loc["ynn_fusion", schema.PREDICTED_S] + 5 * 1e-3)
    assert slow.loc["ynn_fusion", schema.BOUND] == "overhead"
    assert slow.loc["ynn_fusion", schema.T_COMPUTE_S] == plain.loc["ynn_fusion",
                                                                  schema.T_COMPUTE_S]
    # a bf16 convert priced at the software rate (1 ms of work) pays it too, and stays compute-
    # bound: 1 ms + 0.5 ms
    cast = hlo.hlo_costs(CAST, dataclasses.replace(
        base, software_bytes_per_s=(("convert", 6.144e6),), op_overhead_s=5e-4)).set_index(
        schema.OP).loc["wrapped_convert"]
    assert cast[schema.PREDICTED_S] == pytest.approx(1.5e-3) and cast[schema.BOUND] == "compute"


def test_compute_dtype_and_explicit_dtype():
    tpu = load("tpu_style")
    assert hlo.compute_dtype(tpu.instruction("fusion"), tpu) == "bf16"  # the dot's operands
    mesh = load("matmul_allreduce_mesh")
    assert hlo.compute_dtype(mesh.instruction("ynn_fusion"), mesh) == "f32"
    as_bf16 = row(hlo.hlo_costs(tpu, "h100", dtype="f32"), "fusion")
    assert as_bf16[schema.T_COMPUTE_S] == pytest.approx(
        as_bf16[schema.FLOPS] / roofline.peak_flops("h100", "f32"))


CUBLAS_BF16 = """HloModule m
ENTRY %main (p0: bf16[128,256], p1: bf16[256,512]) -> f32[128,512] {
  %p0 = bf16[128,256]{1,0} parameter(0)
  %p1 = bf16[256,512]{1,0} parameter(1)
  %custom-call.1 = (f32[128,512]{1,0}, s8[4194304]{0}) custom-call(bf16[128,256]{1,0} %p0, \
bf16[256,512]{1,0} %p1), custom_call_target="__cublas$lt$matmul", backend_config=\
{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],\
"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  ROOT %gte = f32[128,512]{1,0} get-tuple-element(%custom-call.1), index=0
}
"""


def test_a_library_matmul_runs_at_its_operands_rate():
    # cuBLAS bf16 x bf16 -> f32: the bf16 Tensor Core peak, not the f32 result's (tf32) rate
    m = hlo.parse_module(CUBLAS_BF16)
    assert hlo.compute_dtype(m.instruction("custom-call.1"), m) == "bf16"
    call = row(hlo.hlo_costs(m, "h100"), "custom-call.1")
    assert call[schema.T_COMPUTE_S] == pytest.approx(2 * 128 * 256 * 512 / 9.89e14)


# --- module totals against cost_analysis() ----------------------------------------------------
def xla(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.cost.json").read_text())


def check_against_xla(name: str, report: dict) -> None:
    if report["xla_flops"] is None:  # cost_analysis() has no 'flops' for this module
        assert report["flops_rel_diff"] is None
        return
    if name in LOOPS:
        # HloCostAnalysis counts a while body once; we count it trip-count times.
        trips, dot = LOOPS[name]
        assert abs(report["flops_rel_diff"]) > 0.02
        assert abs(report["flops_loops_once_rel_diff"]) <= 0.02
        assert report["flops"] == pytest.approx(report["xla_flops"] + (trips - 1) * dot, rel=0.02)
    else:
        assert abs(report["flops_rel_diff"]) <= 0.02, report


@pytest.mark.parametrize("name", CAPTURED)
def test_flops_agree_with_cost_analysis(name):
    report = hlo.cross_check(load(name), xla(name))
    check_against_xla(name, report)


@pytest.mark.parametrize("name", CAPTURED)
def test_bytes_agree_with_cost_analysis(name):
    # Measured agreement (slices and in-place updates counted as XLA does), loops counted once.
    report = hlo.cross_check(load(name), xla(name))
    assert abs(report["bytes_loops_once_rel_diff"]) <= 0.02, report


def test_cross_check_reports_loops_and_missing_keys():
    report = hlo.cross_check(load("fori_loop"), [xla("fori_loop")])  # list form accepted
    assert report["loops"] == {"while.5": (5, "backend_config")}
    assert report["unmodeled"] == []
    empty = hlo.cross_check(load("matmul_allgather"), {})
    assert empty["xla_flops"] is None and empty["flops_rel_diff"] is None
    assert empty["flops"] == 2 * 64 * 256 * 512
    assert math.isinf(hlo.cross_check(load("matmul_allgather"), {"flops": 0.0})["flops_rel_diff"])


def test_module_totals_sum_counts():
    m = load("nested_loops")
    flops, _ = hlo.module_totals(m)
    dot = 2 * 64 * 64 * 64
    assert flops == pytest.approx((3 * 5 + 3) * dot, rel=0.01)  # inner dots + called dots


# --- live: compile with the installed jax on 8 CPU devices ------------------------------------
def _programs():
    spec = importlib.util.spec_from_file_location("hlo_programs", FIXTURES / "programs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", CAPTURED)
def test_live_compiled_modules_agree_with_cost_analysis(name):
    compiled = _programs().compile_program(name)
    report = hlo.cross_check(hlo.parse_module(compiled.as_text()), compiled.cost_analysis())
    check_against_xla(name, report)


def test_compute_dtype_of_an_op_without_result_leaves_uses_its_operands():
    from harness.hlo import compute_dtype, parse_module

    text = """HloModule m

ENTRY %main (p: bf16[4,8]) -> () {
  %p = bf16[4,8]{1,0} parameter(0)
  ROOT %cc = () custom-call(%p), custom_call_target="sink"
}
"""
    module = parse_module(text)
    assert compute_dtype(module.instruction("cc"), module) == "bf16"


CAST = """HloModule jit_cast, entry_computation_layout={(bf16[1024]{0}, f32[1024]{0})->(f32[1024]{0}, s32[1024]{0})}

%fused_convert (p: bf16[1024]) -> f32[1024] {
  %p = bf16[1024]{0} parameter(0)
  ROOT %convert.1 = f32[1024]{0} convert(%p)
}

ENTRY %main (x: bf16[1024], y: f32[1024]) -> (f32[1024], s32[1024]) {
  %x = bf16[1024]{0} parameter(0)
  %y = f32[1024]{0} parameter(1)
  %wrapped_convert = f32[1024]{0} fusion(%x), kind=kLoop, calls=%fused_convert
  %convert.2 = s32[1024]{0} convert(%y)
  ROOT %t = (f32[1024]{0}, s32[1024]{0}) tuple(%wrapped_convert, %convert.2)
}
"""  # noqa: E501 (HLO text as XLA prints it)


def test_bf16_converts_take_the_chips_measured_software_rate():
    import dataclasses

    from predictions import hardware

    # whatever cpu chip is registered (a calibration may have set a rate): one without, one with
    base = dataclasses.replace(hardware.CHIPS["cpu"], software_bytes_per_s=(), op_overhead_s=0.0)
    # read 1024 bf16 + write 1024 f32 = 6144 bytes at 6.144 MB/s: 1 ms, compute-bound
    chip = dataclasses.replace(base, software_bytes_per_s=(("convert", 6.144e6),))
    rows = hlo.hlo_costs(CAST, chip).set_index(schema.OP)
    cast = rows.loc["wrapped_convert"]
    assert cast[schema.HBM_BYTES] == 2 * 1024 + 4 * 1024
    assert cast[schema.PREDICTED_S] == pytest.approx(1e-3)
    assert cast[schema.BOUND] == "compute"
    # f32 -> s32 is not a bf16 convert: the memory roofline, as on a chip without the rate
    assert rows.loc["convert.2", schema.PREDICTED_S] == pytest.approx(
        (4 + 4) * 1024 / base.hbm_bytes_per_s)
    plain = hlo.hlo_costs(CAST, base).set_index(schema.OP).loc["wrapped_convert"]
    assert plain[schema.PREDICTED_S] == pytest.approx(6144 / base.hbm_bytes_per_s)
    assert plain[schema.BOUND] == "memory"
