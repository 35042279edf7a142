"""predictions.training (training.md, applied-training.md, gpus.md)."""
from __future__ import annotations

import math

import pytest

from predictions import training, transformer
from predictions.transformer import LLAMA2_13B, LLAMA3_8B, LLAMA3_70B

ALPHA_V5P = 4.59e14 / 1.8e11  # training.md: 2550


def test_tr_ex1_fsdp_minimum_batch_on_v5p():
    # training.md: compute-bound iff tokens per chip > C/W = 2550 on one axis, 850 over three;
    # a full pod then needs 850 * 8960 ~ 7.6M tokens
    assert training.min_batch_per_chip("tpu-v5p", "fsdp") == pytest.approx(2550, rel=0.005)
    assert training.min_batch_per_chip("tpu-v5p", "dp") == pytest.approx(2550, rel=0.005)
    three = training.min_batch_per_chip("tpu-v5p", "fsdp", axes=3)
    assert three == pytest.approx(850, rel=0.005)
    assert three * 8960 == pytest.approx(7.6e6, rel=0.01)


def test_tr_q3_llama2_13b_strategy():
    # training.md Q3: 3M-token batch on a v5p 16x16x16 (4096 chips, 96 GB each)
    B, N = 3e6, 4096
    # (1) pure DP: 10 bytes/param on every chip = 130 GB > 96 GB
    dp = training.memory_per_chip(LLAMA2_13B, B, N, weight_shards=1, chip="tpu-v5p")
    assert dp.params_optimizer_bytes == pytest.approx(130e9, rel=0.01)
    assert dp.fits is False
    # (2) pure FSDP fits in memory but needs >= 850 * 4096 ~ 3.48M tokens > 3M: comms-bound
    assert training.memory_per_chip(LLAMA2_13B, B, N, chip="tpu-v5p").fits is True
    need = training.min_batch_per_chip("tpu-v5p", "fsdp", axes=3) * N
    assert need == pytest.approx(3.48e6, rel=0.01) and need > B
    # (3) FSDP + TP: B/N > 2550^2 / (2 * 13,824) ~ 235; we have 3e6/4096 ~ 732
    bound = training.min_batch_per_chip("tpu-v5p", "fsdp_tp", axes=2, F=13824)
    assert bound == pytest.approx(2550 ** 2 / (2 * 13824), rel=0.005)
    assert bound == pytest.approx(235, rel=0.01) and B / N > bound
    # X_opt = sqrt(2 * B * N / F) ~ 1333 -> 1024-way FSDP x 4-way TP
    assert training.fsdp_tp_optimum(13824, B, N, axes=2) == pytest.approx(1333, rel=0.005)
    assert training.fsdp_tp_split(13824, B, N, axes=2) == (1024, 4)
    # step at 40% MFU = 6 * 3e6 * 13e9 / (4096 * 4.6e14 * 0.4) ~ 0.3 s
    step = training.train_time(LLAMA2_13B, B, "tpu-v5p", N, 0.4)
    assert step == pytest.approx(6 * 3e6 * 13e9 / (4096 * 4.6e14 * 0.4), rel=0.01)
    assert step == pytest.approx(0.3, rel=0.05)


def test_applied_training_llama3_70b_on_a_v5p_pod():
    # applied-training.md: 6.3e24 / (8960 * 4.59e14 * 0.4) = 3.8e6 s ~ 44 days
    t = training.train_time(LLAMA3_70B, 15e12, "tpu-v5p", 8960, 0.4)
    assert t == pytest.approx(3.8e6, rel=0.02)
    assert t / 86400 == pytest.approx(44, rel=0.02)
    # 4M-token batch, 4 checkpoints per layer: ~21.6 TB -> 225 v5p chips; 2.4 GB each on 8960
    assert training.min_chips_for_memory(LLAMA3_70B, 4e6, "tpu-v5p") == pytest.approx(225, rel=0.01)
    per_chip = training.memory_per_chip(LLAMA3_70B, 4e6, 8960)
    assert per_chip.total_bytes == pytest.approx(2.4e9, rel=0.02)
    assert per_chip.total_bytes * 8960 == pytest.approx(21.6e12, rel=0.01)
    # 4 * 1024 * 1024 / 8960 = 468 tokens per chip < 850: pure FSDP is comms-bound
    assert 4 * 1024 * 1024 / 8960 < training.min_batch_per_chip("tpu-v5p", "fsdp", axes=3)
    # X_opt = sqrt(2 * 4.19e6 * 8960 / 28672) = 1618 -> 2048-way FSDP and 4-way TP
    assert training.fsdp_tp_optimum(28672, 4 * 1024 * 1024, 8960, axes=2) == pytest.approx(
        1618, rel=0.005)
    assert training.fsdp_tp_split(28672, 4 * 1024 * 1024, 8960, axes=2) == (2048, 4)


def test_tp_limit_and_multislice():
    # training.md: TP compute-bound while Y < M_Y * F / alpha; applied-inference.md: 2F/2200 ~ 26
    assert training.max_tp(28672, "tpu-v5p") == pytest.approx(28672 / 2550, rel=0.005)
    assert training.max_tp(28672, "tpu-v5e", axes=2) == pytest.approx(26, rel=0.02)
    # training.md: multi-slice DP is compute-bound iff tokens per slice > C / W_dcn
    per_slice = training.min_batch_per_chip("tpu-v5p", "dp", over="dcn")
    assert per_slice == pytest.approx(4.59e14 / 6.25e9)
    assert training.min_batch_per_chip("tpu-v5p", "dp", over="dcn", chips_per_slice=8960) == \
        pytest.approx(per_slice / 8960)


def test_gpu_data_parallel_bound():
    # gpus.md: DP/ZeRO compute-bound iff B/X > C/W, W = NVLink egress in a node (~2200 on H100)
    assert training.min_batch_per_chip("h100", "dp") == pytest.approx(2200, rel=0.01)


def test_mlp_step_model_terms_match_the_table():
    # training.md §6.1 per layer: FLOPs 4BDF/N + 8BDF/N; FSDP bytes 4DF + 8DF; TP 4BD + 8BD
    B, D, F, N = 1e6, 8192, 28672, 64
    W, C = 1.8e11, 4.59e14
    fsdp = training.mlp_step(B, D, F, "tpu-v5p", "fsdp", X=N)
    assert fsdp.t_math_s == pytest.approx(12 * B * D * F / (N * C))
    assert fsdp.t_fsdp_s == pytest.approx(12 * D * F / W) and fsdp.t_tp_s == 0
    dp = training.mlp_step(B, D, F, "tpu-v5p", "dp", X=N)
    assert dp.t_comms_s == pytest.approx(8 * D * F / W)
    tp = training.mlp_step(B, D, F, "tpu-v5p", "tp", Y=8)
    assert tp.t_tp_s == pytest.approx(12 * B * D / W) and tp.t_fsdp_s == 0
    assert fsdp.t_upper_s == pytest.approx(fsdp.t_math_s + fsdp.t_comms_s)
    assert fsdp.t_step_s <= fsdp.t_upper_s <= 2 * fsdp.t_step_s


def test_step_model_reproduces_the_compute_bound_conditions():
    D, F = 8192, 28672
    # FSDP over 3 axes: compute-bound iff B/X > alpha / 3
    for per_chip, expected in ((2 * ALPHA_V5P / 3, "compute"), (0.5 * ALPHA_V5P / 3, "comm")):
        s = training.mlp_step(per_chip * 256, D, F, "tpu-v5p", "fsdp", X=256, axes=3)
        assert s.bound == expected
    # TP: compute-bound iff Y < F / alpha = 11.2
    assert training.mlp_step(1e5, D, F, "tpu-v5p", "tp", Y=8).bound == "compute"
    assert training.mlp_step(1e5, D, F, "tpu-v5p", "tp", Y=16).bound == "comm"
    # FSDP + TP at X_opt: the two comm terms are equal, and compute-bound iff B/N > alpha^2/F
    N, F2 = 4096, 16384
    threshold = ALPHA_V5P ** 2 / F2
    for factor, expected in ((2.0, "compute"), (0.5, "comm")):
        B = factor * threshold * N
        X = math.sqrt(B * N / F2)
        s = training.mlp_step(B, D, F2, "tpu-v5p", "fsdp_tp", X=X, Y=N / X)
        assert s.t_fsdp_s == pytest.approx(s.t_tp_s)
        assert s.bound == expected


def test_llama_step_time_without_comms_is_6ptokens():
    B = 1e5
    s = training.step_time(LLAMA3_8B, B, "tpu-v5p", 1, "fsdp")
    assert (s.X, s.Y, s.t_comms_s) == (1, 1, 0)
    assert s.t_step_s == pytest.approx(training.train_time(LLAMA3_8B, B, "tpu-v5p", 1, 1.0))
    assert s.bound == "compute"
    # tiny per-chip batch under DP: the gradient AllReduce dominates
    small = training.step_time(LLAMA3_8B, 8 * 64, "tpu-v5p", 8, "dp")
    assert small.bound == "comm" and small.t_step_s > small.t_math_s
    # MFU scales only the math
    half = training.step_time(LLAMA3_8B, B, "tpu-v5p", 1, "fsdp", mfu=0.5)
    assert half.t_math_s == pytest.approx(2 * s.t_math_s)
    # fsdp_tp picks the split itself
    mixed = training.step_time(LLAMA3_70B, 4 * 1024 * 1024, "tpu-v5p", 8960, "fsdp_tp", axes=2)
    assert (mixed.X, mixed.Y) == (2048, 4)
    with_attention = training.step_time(LLAMA3_8B, B, "tpu-v5p", 1, "fsdp", seq_len=8192)
    assert with_attention.t_math_s == pytest.approx(
        transformer.train_flops(LLAMA3_8B, B, seq_len=8192) / 4.59e14)


def test_bad_inputs():
    with pytest.raises(ValueError, match="dp, fsdp, fsdp_tp"):
        training.min_batch_per_chip("tpu-v5p", "zero")
    with pytest.raises(ValueError, match="needs F"):
        training.min_batch_per_chip("tpu-v5p", "fsdp_tp")
    with pytest.raises(ValueError, match="axes must be"):
        training.min_batch_per_chip("tpu-v5p", "fsdp", axes=0)
    with pytest.raises(ValueError, match=r"mfu must be in \(0, 1\]"):
        training.train_time(LLAMA3_8B, 1e9, "tpu-v5p", 8, 1.5)
    with pytest.raises(ValueError, match="num_chips must be positive"):
        training.train_time(LLAMA3_8B, 1e9, "tpu-v5p", 0, 0.4)
    with pytest.raises(ValueError, match="dp, fsdp, tp, fsdp_tp"):
        training.step_time(LLAMA3_8B, 1e6, "tpu-v5p", 8, "pipeline")
    with pytest.raises(KeyError, match="known chips"):
        training.train_time(LLAMA3_8B, 1e9, "tpu-v9", 8, 0.4)
    with pytest.raises(ValueError, match="batch_tokens must be positive"):
        training.fsdp_tp_split(28672, -1, 8960)
