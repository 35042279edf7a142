"""Pallas splash attention kernels compiled by libtpu, priced from their shapes
(``harness.hlo.fmha.splash_desc``, ``predictions.rules.FUSED_ATTENTION``).

``fixtures/tpu/splash_llama_train`` (``make_fixtures.py``): the llama_train step, tiny preset
with T = 256 and H = 128 (L = 2, N = 8, K = 4, B = 8), fsdp_tp on a v5e 2x2 slice: per device
B = 8/2 = 4 sequences, N = 8/2 = 4 query heads, K = 4/2 = 2 KV heads. One block of 256 (T < 512).
"""
import gzip
import json
from pathlib import Path

import pytest

from harness.hlo import calls, category, cross_check, executed, instruction_cost, parse_module
from predictions import rules

FIXTURES = Path(__file__).parent / "fixtures" / "tpu"
BF16, F32, S32 = 2, 4, 4
B, T, N, K, H, L = 4, 256, 4, 2, 128, 2
LANES = 128

# transformers.md (reference §5.1): attention forward 4·B·T·S·N·H, half under a causal mask
FWD = 4 * B * T * T * N * H // 2
Q = B * N * T * H * BF16                     # Q, O, dO, dQ
KV = B * K * T * H * BF16                    # K, V, dK, dV
STATS = B * N * T * LANES * F32              # splash's logsumexp, kept lane-wide [N, T, 128]
STATS_BWD = B * N * 8 * T * F32              # logsumexp and di, 8 sublanes wide, backward
SCRATCH = B * T * LANES * F32                # a [block, 128] fp32 output per sequence
MASK_TABLES = 2 * 1                          # two s8[1,1,1] block tables (one 256 block)
Q_SEQUENCE = T * LANES * S32                 # the causal mask's query positions, s32[256,128]


@pytest.fixture(scope="module")
def fixture():
    raw = (FIXTURES / "splash_llama_train.hlo.txt.gz").read_bytes()
    module = parse_module(gzip.decompress(raw).decode())
    meta = json.loads((FIXTURES / "splash_llama_train.json").read_text())
    kernels = {i.name.split(".")[0]: (i, n) for i, n in executed(module)
               if i.name.startswith("splash")}
    return module, meta, kernels


def test_the_step_runs_three_splash_kernels_once_per_layer(fixture):
    _, _, kernels = fixture
    assert set(kernels) == {"splash_mha_fwd_residuals", "splash_mha_dq_no_residuals",
                            "splash_mha_dkv_no_residuals"}
    assert {n for _, n in kernels.values()} == {L}
    assert all(calls.target(i) == "tpu_custom_call" for i, _ in kernels.values())


@pytest.mark.parametrize("kernel, opcode, flops, nbytes", [
    # forward: Q, K, V in; O, logsumexp and three fp32 scratch blocks (m, l, o) out
    ("splash_mha_fwd_residuals", "fused-attention-causal", FWD,
     MASK_TABLES + Q + 2 * KV + Q_SEQUENCE + 3 * SCRATCH + Q + STATS),
    # dQ recomputes QK^T, then dO·V^T and dS·K: 3 matmuls to the forward's 2
    ("splash_mha_dq_no_residuals", "fused-attention-dq-causal", FWD * 3 // 2,
     MASK_TABLES + Q + 2 * KV + 2 * B * N * T * F32 + Q + Q_SEQUENCE + SCRATCH + Q),
    # dK/dV recomputes QK^T, then P^T·dO, dO·V^T and dS^T·Q: 4 matmuls
    ("splash_mha_dkv_no_residuals", "fused-attention-dkv-causal", FWD * 2,
     MASK_TABLES + Q + 2 * KV + 2 * STATS_BWD + Q + 8 * T * S32 + 2 * SCRATCH + 2 * KV),
])
def test_each_kernel_is_priced_from_its_shapes(fixture, kernel, opcode, flops, nbytes):
    module, _, kernels = fixture
    instr, _ = kernels[kernel]
    assert calls.to_desc(instr).opcode == opcode
    cost = instruction_cost(instr, module)
    assert cost.modeled and cost.flops == flops and cost.hbm_bytes == nbytes
    assert category(module, instr) == "attention"


def test_xla_counts_everything_but_the_kernels(fixture):
    # XLA's cost analysis (loop bodies once) leaves Mosaic kernels out: ours less theirs agrees
    module, meta, kernels = fixture
    ours = cross_check(module, meta["cost_analysis"])["flops_loops_once"]
    kernel_flops = FWD * (1 + 1.5 + 2)
    assert sum(instruction_cost(i, module).flops for i, _ in kernels.values()) == kernel_flops
    assert ours - kernel_flops == pytest.approx(meta["cost_analysis"]["flops"], rel=0.01)


def test_backward_kernels_cost_three_and_a_half_forwards():
    # the rule alone: a [1, 2, 512, 64] Q over [1, 1, 512, 64] K (MQA-style GQA, 2 heads)
    q, k = rules.Shape("bf16", (1, 2, 512, 64)), rules.Shape("bf16", (1, 1, 512, 64))
    size = (1, 512, 512, 2, 64)
    cost = {op: rules.cost(rules.OpDesc(op, (q,), (q, k, k), attention=size)).flops
            for op in ("fused-attention-causal", "fused-attention-dq-causal",
                       "fused-attention-dkv-causal", "fused-attention-dq")}
    fwd = 4 * 512 * 512 * 2 * 64 / 2
    assert cost == {"fused-attention-causal": fwd, "fused-attention-dq-causal": 1.5 * fwd,
                    "fused-attention-dkv-causal": 2 * fwd, "fused-attention-dq": 3 * fwd}
