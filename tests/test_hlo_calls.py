"""The custom-call registry (``harness.hlo.calls``) on hand-written GPU HLO and on Pallas TPU
kernels compiled by libtpu.

``fixtures/hlo/gpu_calls.txt`` (hand-written, see its header): x bf16[8,16,32,32] (NCHW), kernel
bf16[64,16,3,3], dy bf16[8,64,32,32], 3x3 window, stride 1, padding 1; a float8 GEMM; B=2,
T=S=512, N=8 query heads (2 KV heads), H=64 attention; then calls no shape can cost.
``fixtures/pallas/`` (``make_pallas.py``): one Pallas matmul, bf16 512^3, with and
without a ``pl.CostEstimate``, and XLA:TPU's ``cost_analysis()`` of each.
"""
import json
from pathlib import Path

import pytest

from harness import hlo, schema
from harness.hlo import calls

HERE = Path(__file__).parent / "fixtures"
BF16, F32 = 2, 4


@pytest.fixture(scope="module")
def gpu():
    return hlo.parse_module((HERE / "hlo" / "gpu_calls.txt").read_text())


def _cost(module, name):
    return hlo.instruction_cost(module.instruction(name), module)


# 3x3 window, stride 1, padding 1 over 32 positions: 32 x 3 = 96 (output, kernel) pairs per
# spatial dim, less the two that fall on the padding (first output x first tap, last x last)
PAIRS = 32 * 3 - 2
CONV_FLOPS = 2 * 8 * 64 * 16 * PAIRS * PAIRS   # 2 x batch x C_out x C_in x pairs(H) x pairs(W)
X, W, DY = 8 * 16 * 32 * 32 * BF16, 64 * 16 * 3 * 3 * BF16, 8 * 64 * 32 * 32 * BF16


@pytest.mark.parametrize("name, nbytes", [
    ("conv-bwd-input.1", DY + W + X),     # reads dy and the kernel, writes dx
    ("conv-bwd-filter.1", X + DY + W),    # reads x and dy, writes dW (not the u8 workspace)
    ("conv-bias-relu.1", X + W + 64 * F32 + DY),  # + the f32 bias; writes y
])
def test_convolution_calls_in_each_direction_do_the_forward_multiply_adds(gpu, name, nbytes):
    # transformers.md: 2NPM forward, 2NPM for the input gradient, 2NPM for the weight gradient
    cost = _cost(gpu, name)
    assert cost.flops == pytest.approx(CONV_FLOPS, rel=1e-12) and CONV_FLOPS == 144_769_024
    assert cost.hbm_bytes == nbytes
    assert hlo.category(gpu, gpu.instruction(name)) == "matmul"


def test_f8_gemm_is_2mnk_at_the_fp8_peak(gpu):
    # a8 f8e4m3fn[128,256] x b8 f8e4m3fn[512,256], contracting dim 1 of each (B transposed)
    cost = _cost(gpu, "gemm-f8.1")
    assert cost.flops == 2 * 128 * 512 * 256
    assert cost.hbm_bytes == 128 * 256 + 512 * 256 + 2 * F32 + 128 * 512 * BF16  # + two scales
    assert hlo.compute_dtype(gpu.instruction("gemm-f8.1"), gpu) == "f8e4m3fn"


B, T, S, N, H = 2, 512, 512, 8, 64
Q_BYTES = OUT_BYTES = B * T * N * H * BF16
KV_BYTES = B * S * 2 * H * BF16
STATS, RNG = B * N * T * F32, 2 * 8


def test_transformer_engine_attention_from_its_attributes(gpu):
    # transformers.md: QK^T and PV, 4·B·T·S·N·H forward; causal (mask_type 2) half of it
    fwd = _cost(gpu, "te-fwd.1")
    assert fwd.flops == 4 * B * T * S * N * H * 0.5
    # reads Q, K, V, the empty bias, seed and the two sequence-length vectors; writes O, the
    # softmax statistics and the RNG state; the u8 workspace stays in the library
    assert fwd.hbm_bytes == Q_BYTES + 2 * KV_BYTES + 0 + RNG + 2 * 3 * 4 + OUT_BYTES + STATS + RNG
    # backward: 2.5x the forward (five T x S matmuls to two, FlashAttention-2's accounting)
    assert _cost(gpu, "te-bwd.1").flops == 2.5 * 4 * B * T * S * N * H * 0.5
    assert hlo.category(gpu, gpu.instruction("te-fwd.1")) == "attention"


def test_transformer_engine_sliding_window_counts_the_keys_each_query_sees(gpu):
    # causal, window_size_left=128: query i sees keys i-128 .. i, 129 of them once i >= 128;
    # queries 0..128 see 1..129 keys, the other 383 see 129 each
    pairs = 129 * 130 // 2 + (T - 129) * 129
    assert _cost(gpu, "te-swa.1").flops == 4 * B * pairs * N * H


def test_cudnn_attention_under_its_2023_name(gpu):
    assert _cost(gpu, "fmha-2023.1").flops == 4 * B * T * S * N * H  # no mask


@pytest.mark.parametrize("name, reason", [
    ("te-thd.1", "qkv_layout 14 packs sequences (THD)"),
    ("te-opaque.1", "no mask_type attribute (TransformerEngine before its FFI calls"),
    ("triton.1", "a Triton kernel"),
    ("mosaic.1", "a Mosaic GPU kernel"),
    ("callback.1", "a host callback"),
    ("mystery.1", "no rule (an opaque library call; shapes do not give its FLOPs)"),
])
def test_what_no_shape_can_cost_says_why(gpu, name, reason):
    instr = gpu.instruction(name)
    assert not _cost(gpu, name).modeled
    why = calls.why_unmodeled(instr)
    assert why.startswith(f"custom call {calls.target(instr)}: ") and reason in why
    row = hlo.hlo_costs(gpu, "h100").set_index(schema.OP).loc[name]
    assert row[schema.BOUND] == schema.UNMODELED and row[schema.WHY_UNMODELED] == why


def test_sort_and_random_bits_take_their_opcodes_rules(gpu):
    # CUB radix sort: the sort rule's n·log2(n) convention; the u8 scratch is not traffic
    sort = _cost(gpu, "sort.1")
    assert sort.flops == 1024 * 10 and sort.hbm_bytes == 2 * 1024 * F32
    # threefry: random bits like rng, one op per output element, reads 4 and writes 2 arrays
    rng = _cost(gpu, "threefry.1")
    assert rng.flops == 2 * 1024 and rng.hbm_bytes == 6 * 1024 * 4


def test_every_modeled_row_has_an_empty_reason(gpu):
    df = hlo.hlo_costs(gpu, "h100")
    modeled = df[schema.BOUND] != schema.UNMODELED
    assert (df.loc[modeled, schema.WHY_UNMODELED] == "").all()
    assert (df.loc[~modeled, schema.WHY_UNMODELED] != "").all() and (~modeled).sum() == 6


def test_registry_names_each_target_once():
    assert not set(calls.CUSTOM_CALLS) & set(calls.NO_RULE)
    assert all(reason and not reason.endswith(".") for reason in calls.NO_RULE.values())


M = 512


def _pallas(name):
    text = (HERE / "pallas" / f"{name}.hlo.txt").read_text()
    return hlo.parse_module(text), json.loads((HERE / "pallas" / f"{name}.json").read_text())


def test_pallas_kernel_is_priced_by_its_cost_estimate():
    module, fixture = _pallas("pallas_matmul_estimate")
    (call,) = [i for i, _ in hlo.executed(module) if i.opcode == "custom-call"]
    assert calls.target(call) == "tpu_custom_call"
    cost = hlo.instruction_cost(call, module)
    # what the kernel's author declared: 2·M·N·K FLOPs, A, B and C read or written once
    assert cost.flops == 2 * M**3 and cost.hbm_bytes == 3 * M * M * BF16
    # XLA:TPU's own cost analysis reports the same declaration
    xla = fixture["cost_analysis"]
    assert xla["flops"] == cost.flops and xla["bytes accessed"] == cost.hbm_bytes
    assert hlo.cross_check(module, xla)["flops_rel_diff"] == 0.0
    assert hlo.cross_check_skip(module, xla) == ""  # so a run's report checks against it


def test_pallas_kernel_without_an_estimate_says_why():
    module, fixture = _pallas("pallas_matmul")
    (call,) = [i for i, _ in hlo.executed(module) if i.opcode == "custom-call"]
    assert not hlo.instruction_cost(call, module).modeled
    why = calls.why_unmodeled(call)
    assert "without a cost_estimate" in why and "matmul_kernel" in why  # from its op_name
    assert "flops" not in fixture["cost_analysis"]  # XLA cannot tell its FLOPs either


def test_a_convolution_whose_shapes_do_not_fit_its_labels_says_so():
    # dx of rank 3 where dim_labels bf01 give the input rank 4: unpriced, with the reason
    dx = "conv-bwd-input.1 = (bf16[8,16,32,32]{3,2,1,0}"
    text = (HERE / "hlo" / "gpu_calls.txt").read_text()
    assert dx in text
    text = text.replace(dx, "conv-bwd-input.1 = (bf16[16,32,32]{2,1,0}")
    module = hlo.parse_module(text)
    assert not _cost(module, "conv-bwd-input.1").modeled
    why = calls.why_unmodeled(module.instruction("conv-bwd-input.1"))
    assert "dim_labels" in why and "do not fit the input" in why
