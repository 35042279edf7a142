"""predictions.inference (inference.md, applied-inference.md)."""
from __future__ import annotations

import pytest

from predictions import inference, transformer
from predictions.transformer import LLAMA3_70B

MS = 1e-3


def test_in_pq1_decode_step_of_a_30b_model():
    # inference.md: 30B params in int8 (30e9 B), v5e 4x4, 8192 context, KV 100 kB per token
    kv_per_seq = 100e3 * 8192
    assert kv_per_seq == pytest.approx(819e6, rel=0.001)
    small = inference.decode_terms(30e9, 30e9, 4 * kv_per_seq, 4, "tpu-v5e", 16)
    # batch 4: (4 * 819e6 + 30e9) / (16 * 8.2e11) ~ 2.5 ms, memory-bound
    assert small.step_s == pytest.approx((4 * 819.2e6 + 30e9) / (16 * 8.2e11))
    assert small.step_s == pytest.approx(2.5 * MS, rel=0.03)
    assert small.bound == "memory"
    # batch 256: 16 ms of KV + max(4.9 ms of FLOPs, 2.3 ms of params) ~ 21 ms, compute-bound
    big = inference.decode_terms(30e9, 30e9, 256 * kv_per_seq, 256, "tpu-v5e", 16)
    assert big.kv_time_s == pytest.approx(16 * MS, rel=0.01)
    assert big.flops_time_s == pytest.approx(4.9 * MS, rel=0.01)
    assert big.param_time_s == pytest.approx(2.3 * MS, rel=0.01)
    assert big.step_s == pytest.approx(21 * MS, rel=0.02)
    assert big.bound == "compute"


def test_ai3_llama3_70b_int8_decode_on_v5e():
    # applied-inference.md: int8 weights and KV, batch 32, 8192 context, v5e 4x2
    s = inference.decode_step(LLAMA3_70B, "tpu-v5e", 8, 32, 8192, weight_bytes=1, kv_bytes=1)
    # KV 160e3 * 8192 * 32 ~ 41.9e9 B (the book rounds 163,840 B/token to 160e3); total ~112e9
    assert s.kv_bytes == pytest.approx(41.9e9, rel=0.03)
    assert s.kv_bytes + s.param_bytes == pytest.approx(112e9, rel=0.02)
    # memory-bound (32 < B_crit = 120): 112e9 / (8 * 8.2e11) ~ 17 ms; 1882 tok/s, 235 per chip
    assert s.bound == "memory"
    assert s.step_s == pytest.approx(17 * MS, rel=0.03)
    assert s.tokens_per_s == pytest.approx(1882, rel=0.03)
    assert s.tokens_per_s_per_chip == pytest.approx(235, rel=0.03)
    assert inference.critical_batch("tpu-v5e", weight_bytes=1) == pytest.approx(120, rel=0.01)
    # >= 7 chips of 16 GB are needed: 112e9 / 16e9
    assert (s.kv_bytes + s.param_bytes) / 16e9 == pytest.approx(7, rel=0.02)
    # on a 4x4 the latency halves (~8.5 ms), per-chip throughput unchanged
    s16 = inference.decode_step(LLAMA3_70B, "tpu-v5e", 16, 32, 8192, weight_bytes=1, kv_bytes=1)
    assert s16.step_s == pytest.approx(8.5 * MS, rel=0.03)
    assert s16.tokens_per_s_per_chip == pytest.approx(s.tokens_per_s_per_chip)
    assert inference.decode_step_time(LLAMA3_70B, "tpu-v5e", 8, 32, 8192, 1, 1) == s.step_s


def test_applied_inference_prefill_time():
    # applied-inference.md: 2 * 70e9 * 8192 / (16 * 1.97e14 * 0.4) = 0.91 s at 40% MFU
    t = inference.prefill_time(LLAMA3_70B, "tpu-v5e", 16, 8192, mfu=0.4)
    assert t == pytest.approx(0.91, rel=0.02)
    p = inference.prefill(LLAMA3_70B, "tpu-v5e", 16, 8192, mfu=0.4)
    assert p.bound == "compute" and p.flops == pytest.approx(2 * 70e9 * 8192, rel=0.01)
    # a one-token "prefill" is bounded by reading the weights once
    assert inference.prefill(LLAMA3_70B, "tpu-v5e", 16, 1).bound == "memory"
    # attention adds FLOPs for long prompts
    assert inference.prefill(LLAMA3_70B, "tpu-v5e", 16, 8192, seq_len=8192).flops > p.flops


def test_critical_batches_and_the_two_betas():
    # applied-inference.md: bf16 240; int8 weights + bf16 FLOPs 120; int8 weights + int8 FLOPs 240
    assert inference.critical_batch("tpu-v5e") == pytest.approx(240, rel=0.01)
    assert inference.critical_batch("tpu-v5e", weight_bytes=1) == pytest.approx(120, rel=0.01)
    assert inference.critical_batch("tpu-v5e", 1, "int8") == pytest.approx(240, rel=0.01)
    # beta_bits: B_crit = beta * alpha_hbm with beta = bits per weight / bits per activation
    assert inference.beta_bits(8, 16) == 0.5
    assert inference.critical_batch("tpu-v5e", 1) == pytest.approx(
        inference.beta_bits(8, 16) * inference.critical_batch("tpu-v5e"))
    # beta_bw = W_hbm / W_ici, "~8" on v5e and v6e
    assert inference.beta_bw("tpu-v5e") == pytest.approx(8.2e11 / 9e10)
    assert 8 <= inference.beta_bw("tpu-v5e") < 10 and 8 <= inference.beta_bw("tpu-v6e") < 10


def test_decode_model_parallel_limits():
    # applied-inference.md: at batch 64, ICI binds only for Y > F/(8B) = 56 (beta rounded to 8;
    # exactly W_hbm/W_ici = 9.1 here)
    y = inference.decode_ici_bound_tp(28672, 64, "tpu-v5e")
    assert y == pytest.approx(28672 / (64 * 8.2e11 / 9e10))
    assert y == pytest.approx(56, rel=0.15)
    # on a 4x8 (Y = 32), batch 64: T_ici = 2BD/W_ici ~ 11 us, T_hbm = 2DF/(Y W_hbm) ~ 18 us,
    # T_math = 2BDF/(Y C) ~ 4 us: still HBM-bound
    layer = inference.model_parallel_layer(64, 8192, 28672, 32, "tpu-v5e")
    assert layer.t_ici_s == pytest.approx(2 * 64 * 8192 / 9e10)
    assert layer.t_hbm_s == pytest.approx(18e-6, rel=0.02)
    assert layer.t_math_s == pytest.approx(2 * 64 * 8192 * 28672 / (32 * 1.97e14))
    assert layer.bound == "memory"
    # inference.md: latency-bound when Y > B*D/45,000 with int8 activations on v5e
    assert inference.latency_bound_tp(32, 8192, "tpu-v5e") == pytest.approx(32 * 8192 / 45e3)


def test_max_batch_and_smallest_slice():
    # applied-inference.md: bf16 on a 4x4: 256 GB - 140 GB leaves room for 43 caches of 8k
    assert inference.max_batch(LLAMA3_70B, "tpu-v5e", 16, 8192) == pytest.approx(43, rel=0.05)
    # batch = what fits exactly: one more sequence no longer fits
    b = inference.max_batch(LLAMA3_70B, "tpu-v5e", 16, 8192)
    P = transformer.param_count(LLAMA3_70B)
    kv = transformer.kv_cache_bytes(LLAMA3_70B, 8192)
    assert 2 * P + b * kv <= 16 * 16e9 < 2 * P + (b + 1) * kv
    assert inference.max_batch(LLAMA3_70B, "tpu-v5e", 4, 8192) == 0  # weights alone overflow
    # a full HBM costs HBM / W_hbm per step: 16e9 / 8.2e11 ~ 19 ms
    full = inference.decode_step(LLAMA3_70B, "tpu-v5e", 16, b, 8192)
    assert full.step_s == pytest.approx(16e9 / 8.2e11, rel=0.03)
    # smallest slices: bf16 8.75 chips -> 4x4, int8 4.38 -> 4x2
    assert inference.min_chips(LLAMA3_70B, "tpu-v5e") == 16
    assert inference.min_chips(LLAMA3_70B, "tpu-v5e", weight_bytes=1) == 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch=0), "batch must be positive"),
    (dict(context=-1), "tokens must be positive"),
    (dict(num_chips=0), "num_chips must be positive"),
    (dict(weight_bytes=0), "weight_bytes must be positive"),
])
def test_bad_decode_inputs(kwargs, match):
    args = dict(cfg=LLAMA3_70B, chip="tpu-v5e", num_chips=8, batch=32, context=8192)
    with pytest.raises(ValueError, match=match):
        inference.decode_step_time(**{**args, **kwargs})


def test_bad_names_and_mfu():
    with pytest.raises(KeyError, match="known chips"):
        inference.decode_step_time(LLAMA3_70B, "v5e", 8, 32, 8192)
    with pytest.raises(ValueError, match=r"mfu must be in \(0, 1\]"):
        inference.prefill_time(LLAMA3_70B, "tpu-v5e", 16, 8192, mfu=0)
