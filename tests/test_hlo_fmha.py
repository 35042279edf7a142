"""cuDNN fused attention custom calls (``__cudnn$fmha*``): descs, costs and category.

The fixture ``gpu_fmha.txt`` is hand-written in XLA:GPU's format (not captured). Its shapes:
B=2 sequences, N=8 query heads over K=2 KV heads, H=64; causal self-attention over T=S=1024
(forward and backward) and a cross-attention forward of T=256 queries over S=1024 keys.
Expected FLOPs follow ``predictions.rules.FUSED_ATTENTION``: forward 4·B·T·S·N·H, half when
causal; backward 2.5x the forward.
"""
from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import pytest

from harness import hlo, schema
from predictions import rules

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "hlo" / "gpu_fmha.txt"
B, N, K, H, BF16, F32 = 2, 8, 2, 64, 2, 4


@pytest.fixture(scope="module")
def module():
    return hlo.parse_module(FIXTURE.read_text())


def _cost(module, name):
    return rules.cost(hlo.to_desc(module.instruction(name), module))


def test_causal_forward(module):
    T = S = 1024
    d = hlo.to_desc(module.instruction("custom-call.1"), module)
    assert d.opcode == "fused-attention-causal"
    c = rules.cost(d)
    assert c.flops == 4 * B * T * S * N * H * 0.5
    # reads Q, K, V; writes O and the fp32 softmax statistics [B, N, T]; not the u8 workspace
    assert c.hbm_bytes == (B * T * N * H + 2 * B * S * K * H + B * T * N * H) * BF16 \
        + B * N * T * F32


def test_causal_backward(module):
    T = S = 1024
    c = _cost(module, "custom-call.5")
    assert c.flops == 2.5 * 4 * B * T * S * N * H * 0.5
    q = o = do = dq = B * T * N * H * BF16
    k = v = dk = dv = B * S * K * H * BF16
    assert c.hbm_bytes == q + k + v + B * N * T * F32 + do + o + dq + dk + dv


def test_cross_attention_takes_s_from_the_keys(module):
    T, S = 256, 1024
    d = hlo.to_desc(module.instruction("custom-call.9"), module)
    assert d.opcode == "fused-attention"       # NO_MASK: every key counts
    assert rules.cost(d).flops == 4 * B * T * S * N * H


def test_fmha_rows_are_attention_with_predictions(module):
    df = hlo.hlo_costs(module, "h100")
    rows = df[df[schema.OPCODE] == "custom-call"].set_index(schema.OP)
    assert set(rows.index) == {"custom-call.1", "custom-call.5", "custom-call.9"}
    assert (rows[schema.CATEGORY] == "attention").all()
    assert (rows[schema.BOUND] != schema.UNMODELED).all() and (rows[schema.PREDICTED_S] > 0).all()


def test_without_dimension_numbers_keys_are_bsKh():
    # jax's default BTNH layout: K is [B, S, K, H], S at dim 1
    d = rules.OpDesc("fused-attention", (rules.Shape("bf16", (1, 128, 4, 8)),),
                     (rules.Shape("bf16", (1, 128, 4, 8)), rules.Shape("bf16", (1, 512, 2, 8)),
                      rules.Shape("bf16", (1, 512, 2, 8))), rhs_contracting=(3,), rhs_batch=(0, 2))
    assert rules.cost(d).flops == 4 * 1 * 128 * 512 * 4 * 8
    assert not rules.cost(rules.OpDesc("fused-attention")).modeled


def test_xla_attention_is_categorised_as_attention():
    """On CPU ``jax.nn.dot_product_attention`` is plain dots and softmax fusions: those inside the
    workload's ``attention`` scope are categorised attention, with their dots' FLOPs."""
    B_, T, Nq, Kv, Hd = 2, 64, 4, 2, 16

    def f(q, k, v):
        with jax.named_scope("attention"):
            return jax.nn.dot_product_attention(q, k, v, is_causal=True)

    q = jnp.zeros((B_, T, Nq, Hd), jnp.float32)
    kv = jnp.zeros((B_, T, Kv, Hd), jnp.float32)
    df = hlo.hlo_costs(jax.jit(f).lower(q, kv, kv).compile().as_text(), "h100")
    assert (df[schema.BOUND] != schema.UNMODELED).all()
    attention = df[df[schema.CATEGORY] == "attention"]
    # QK^T and PV, 2·B·T·S·N·H each (XLA computes the masked half too)
    assert attention[schema.FLOPS].sum() >= 2 * 2 * B_ * T * T * Nq * Hd
    assert df[df[schema.CATEGORY] == "matmul"][schema.FLOPS].sum() == 0
