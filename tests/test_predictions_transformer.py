"""predictions.transformer (transformers.md, applied-training.md): parameters, FLOPs, KV, remat."""
from __future__ import annotations

import dataclasses

import pytest

from predictions import transformer
from predictions.transformer import LLAMA2_13B, LLAMA3_8B, LLAMA3_70B, LLAMA3_405B, Config


def test_tf_q1_dense_model_accounting():
    # transformers.md Q1: D = 4096 (the book rounds to 4e3), F = 4D, V = 32k, L = 64, MHA NH = D
    rounded = Config(L=64, D=4000, F=16000, N=32, K=32, H=125, V=32000)
    assert transformer.param_count(rounded) == pytest.approx(16e9, rel=0.05)
    # the book's formula L*(3DF + 4DNH + D) + 2DV, with our second norm and final norm on top
    D, F, L, V = 4000, 16000, 64, 32000
    assert transformer.param_count(rounded) == L * (3 * D * F + 4 * D * D + 2 * D) + D + 2 * D * V
    exact = Config(L=64, D=4096, F=16384, N=32, K=32, H=128, V=32000)
    # attention share of layer params = 4D^2 / (4D^2 + 12D^2) = 1/4
    attn, mlp = transformer.attention_params(exact), transformer.mlp_params(exact)
    assert attn / (attn + mlp) == 0.25
    # int8 KV per token = 2 * L * N * H = 524,288 B ("512 kB")
    assert transformer.kv_cache_bytes(exact, 1, bytes_per_elem=1) == 524_288


def test_at1_llama3_70b_parameters():
    # applied-training.md: MLP 56.3e9, embeddings 2.1e9, attention 12e9, total 70.4e9
    parts = transformer.param_breakdown(LLAMA3_70B)
    assert parts["mlp"] == pytest.approx(56.3e9, rel=0.005)
    assert parts["embeddings"] == pytest.approx(2.1e9, rel=0.02)
    assert parts["attention"] == pytest.approx(12e9, rel=0.01)
    assert parts["total"] == pytest.approx(70.4e9, rel=0.005)
    # the book's unrounded parts sum to 70.55e9; norms add only 80*2*8192 + 8192
    assert parts["total"] == pytest.approx(70.55e9, rel=0.001)
    assert parts["norms"] == 80 * 2 * 8192 + 8192
    assert sum(v for k, v in parts.items() if k != "total") == parts["total"]


def test_llama3_70b_train_flops_per_token():
    # applied-training.md: 6 * 70e9 = 4.2e11 FLOPs per token; 15e12 tokens -> 6.3e24
    assert transformer.train_flops(LLAMA3_70B, 1) == pytest.approx(4.2e11, rel=0.01)
    assert transformer.train_flops(LLAMA3_70B, 15e12) == pytest.approx(6.3e24, rel=0.01)
    assert transformer.forward_flops(LLAMA3_70B, 1) == pytest.approx(
        transformer.train_flops(LLAMA3_70B, 1) / 3)


@pytest.mark.parametrize("cfg, public_count", [
    # public Hugging Face parameter counts (not from the book): the norms must be counted
    (LLAMA3_8B, 8_030_261_248), (LLAMA3_70B, 70_553_706_496),
    (LLAMA3_405B, 405_853_388_800), (LLAMA2_13B, 13_015_864_320),
])
def test_param_count_equals_the_real_models(cfg, public_count):
    assert transformer.param_count(cfg) == public_count


def test_model_configs_from_the_book():
    # reference §9: LLaMA-3 70B and LLaMA-2 13B
    assert dataclasses.astuple(LLAMA3_70B) == (80, 8192, 28672, 64, 8, 128, 128256, False)
    assert dataclasses.astuple(LLAMA2_13B) == (40, 5120, 13824, 40, 40, 128, 32000, False)
    assert LLAMA3_70B.F == 3.5 * LLAMA3_70B.D and LLAMA3_70B.G == 8
    assert set(transformer.MODELS) == {"llama3-8b", "llama3-70b", "llama3-405b", "llama2-13b"}
    assert transformer.model("LLaMA3-70B") is LLAMA3_70B


def test_tied_embeddings_count_dv_once():
    tied = dataclasses.replace(LLAMA3_8B, tied_embeddings=True)
    assert transformer.param_count(LLAMA3_8B) - transformer.param_count(tied) == 4096 * 128256


def test_attention_share_is_t_over_8d():
    # transformers.md: with F = 4D, NH = D, N = K, attention / matmul FLOPs = T / (8D)
    cfg = Config(L=2, D=4096, F=16384, N=32, K=32, H=128, V=1000)
    tokens, T = 8 * 8192, 8192
    matmul = 6 * cfg.L * (transformer.mlp_params(cfg) + transformer.attention_params(cfg)) * tokens
    attention = transformer.attention_flops(cfg, tokens, T, training=True)
    assert attention / matmul == pytest.approx(T / (8 * cfg.D))
    # 12 BTSNH per layer for training; train_flops adds it to 6 P tokens
    assert attention == 12 * tokens * T * cfg.N * cfg.H * cfg.L
    assert transformer.train_flops(cfg, tokens, seq_len=T) == pytest.approx(
        6 * transformer.param_count(cfg) * tokens + attention)
    assert transformer.attention_flops(cfg, tokens, T, causal=True) == attention / 3 / 2


def test_kv_cache_bytes_llama3_70b():
    # applied-inference.md: int8 KV per token 2*K*H*L = 163,840 B (the text says "160 kB")
    assert transformer.kv_cache_bytes(LLAMA3_70B, 1, 1) == 2 * 8 * 128 * 80
    assert transformer.kv_cache_bytes(LLAMA3_70B, 1, 1) == pytest.approx(160e3, rel=0.03)
    # bf16 cache for 8192 tokens: 2 bytes each
    assert transformer.kv_cache_bytes(LLAMA3_70B, 8192) == 2 * 2 * 8 * 128 * 80 * 8192


def test_activation_and_checkpoint_bytes():
    cfg, tokens = LLAMA3_70B, 1e6
    # transformers.md: block remat keeps 2*B*T*D*L bytes; everything ~ 2*20*B*T*D*L
    assert transformer.activation_bytes(cfg, tokens, "block") == 2 * tokens * cfg.D * cfg.L
    assert transformer.activation_bytes(cfg, tokens, "none") == 2 * 20 * tokens * cfg.D * cfg.L
    # "only big matmul outputs": Q, K, V, O and the three MLP outputs = 7 tensors
    widths = cfg.N * cfg.H + 2 * cfg.K * cfg.H + cfg.D + 2 * cfg.F + cfg.D
    assert transformer.activation_bytes(cfg, tokens, "matmuls") == 2 * tokens * cfg.L * widths
    # applied-training.md: 2 * 8192 * 4e6 * 4 * 80 ~ 20.9 TB of checkpoints
    assert transformer.checkpoint_bytes(cfg, 4e6, 4) == pytest.approx(20.9e12, rel=0.01)
    with pytest.raises(ValueError, match="none, block, matmuls"):
        transformer.activation_bytes(cfg, tokens, "some")


@pytest.mark.parametrize("kwargs, match", [
    (dict(L=0), "Config.L must be a positive integer"),
    (dict(D=-1), "Config.D must be a positive integer"),
    (dict(F=2.5), "Config.F must be a positive integer"),
    (dict(N=64, K=3), "multiple of KV heads"),
])
def test_bad_configs(kwargs, match):
    base = dataclasses.asdict(LLAMA3_8B)
    with pytest.raises(ValueError, match=match):
        Config(**{**base, **kwargs})


def test_bad_inputs_name_the_choices():
    with pytest.raises(KeyError, match="llama3-8b, llama3-70b, llama3-405b, llama2-13b"):
        transformer.model("gpt-5")
    for bad in (0, -1):
        with pytest.raises(ValueError, match="tokens must be positive"):
            transformer.train_flops(LLAMA3_8B, bad)
        with pytest.raises(ValueError, match="tokens must be positive"):
            transformer.kv_cache_bytes(LLAMA3_8B, bad)
