"""LLaMA-3 with fused attention (``jax.nn.dot_product_attention``) against the hand-written path,
and the decode step's KV cache donated and updated in place."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workloads
from workloads.llama import attention as gqa
from workloads.llama import model, serve, train
from workloads.llama.config import dims_of
from workloads.llama.sharding import Sharder
from workloads.mesh import make_mesh

UNSHARDED = Sharder(None, "dp", dims_of(train.PRESETS["tiny"]))


def _np_gqa(q, k, v, q_pos):
    """Float64 NumPy attention, one query head at a time: head n reads KV head n // (N/K), key s
    is visible to query t iff s <= q_pos[b, t]."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    out = np.zeros((B, T, N, H))
    visible = np.arange(S)[None, None, :] <= q_pos[:, :, None]           # [B, T, S]
    for n in range(N):
        kv = n // (N // K)
        s = np.einsum("bth,bsh->bts", q[:, :, n], k[:, :, kv]) / np.sqrt(H)
        s = np.where(visible, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        out[:, :, n] = np.einsum("bts,bsh->bth", e / e.sum(-1, keepdims=True), v[:, :, kv])
    return out


@pytest.mark.parametrize("impl", ["fused", "naive"])
@pytest.mark.parametrize("T,S,cached", [(16, 16, False), (3, 16, True)])
def test_gqa_matches_numpy(impl, T, S, cached):
    # N=8 query heads over K=2 KV heads (G=4); cached: 3 queries at slots 9..11 of 16
    rng = np.random.default_rng(0)
    B, N, K, H = 2, 8, 2, 16
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((B, T, N, H), (B, S, K, H), (B, S, K, H)))
    q_pos = np.broadcast_to(np.arange(T) + (9 if cached else 0), (B, T)).astype(np.int32)
    fn = jax.jit(lambda q, k, v, p: gqa.attention(q, k, v, p if cached else None, UNSHARDED,
                                                  impl))
    got = fn(q, k, v, q_pos)
    np.testing.assert_allclose(np.asarray(got), _np_gqa(q, k, v, q_pos), rtol=1e-5, atol=1e-5)
    # GQA without repeating K/V: no [B, S, N, H] array appears (S != T in the cached case)
    if cached:
        text = fn.lower(q, k, v, q_pos).as_text()
        assert f"{B}x{S}x{N}x{H}" not in text and f"[{B},{S},{N},{H}]" not in text


def test_fused_picks_cudnn_only_for_causal_bf16_on_gpu(monkeypatch):
    q = lambda dtype, H=128: jax.ShapeDtypeStruct((1, 8, 4, H), dtype)
    assert gqa.fused_implementation(q(jnp.bfloat16), True, UNSHARDED) == "xla"  # CPU here
    monkeypatch.setattr(gqa, "_platform", lambda sh: "gpu")
    assert gqa.fused_implementation(q(jnp.bfloat16), True, UNSHARDED) == "cudnn"
    assert gqa.fused_implementation(q(jnp.float16, 48), True, UNSHARDED) == "cudnn"
    assert gqa.fused_implementation(q(jnp.float32), True, UNSHARDED) == "xla"
    assert gqa.fused_implementation(q(jnp.bfloat16, 12), True, UNSHARDED) == "xla"  # H % 8
    assert gqa.fused_implementation(q(jnp.bfloat16), False, UNSHARDED) == "xla"     # decode


def test_unknown_attention_is_a_one_line_error():
    with pytest.raises(workloads.WorkloadError, match="unknown attention 'flash'; valid: fused"):
        workloads.make_config("llama_train", "tiny", {"attention": "flash"})


def _train_losses(attention, dtype, mesh=None, steps=2):
    cfg = dataclasses.replace(train.PRESETS["tiny"], param_dtype=dtype, attention=attention,
                              parallelism="fsdp_tp")
    fn, (p, o, x, y) = train.build(cfg, mesh)
    losses = []
    for _ in range(steps):
        p, o, loss = fn(p, o, x, y)
        losses.append(float(loss))
    return losses


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_train_loss_fused_matches_naive():
    # fp32: the same function up to summation order; bf16: within bf16's 2^-8 relative step
    assert _train_losses("fused", "float32") == pytest.approx(_train_losses("naive", "float32"),
                                                              rel=2e-5)
    mesh = make_mesh("4x2")
    assert _train_losses("fused", "bfloat16", mesh) == pytest.approx(
        _train_losses("naive", "bfloat16", mesh), rel=1e-2)


def _forward(params, toks, attention, dtype):
    d = dataclasses.replace(dims_of(train.PRESETS["tiny"]), attention=attention)
    return np.asarray(jax.jit(lambda p, t: model.forward(p, t, d, UNSHARDED, dtype))(params, toks)
                      .astype(jnp.float32))


def test_bf16_logits_fused_match_naive_and_are_causal():
    d = dims_of(train.PRESETS["tiny"])
    params = model.init_params(d, 0, jnp.bfloat16)
    toks = np.random.default_rng(1).integers(0, d.V, (2, 16), dtype=np.int32)
    fused = _forward(params, toks, "fused", jnp.bfloat16)
    naive = _forward(params, toks, "naive", jnp.bfloat16)
    scale = np.max(np.abs(naive))
    assert np.max(np.abs(fused - naive)) < 2 ** -6 * scale   # a few bf16 roundings of |logit|
    # causal: changing token 10 leaves the logits at positions 0..9 exactly as they were
    changed = toks.copy()
    changed[:, 10] = (changed[:, 10] + 1) % d.V
    after = _forward(params, changed, "fused", jnp.bfloat16)
    np.testing.assert_array_equal(after[:, :10], fused[:, :10])
    assert np.max(np.abs(after[:, 10:] - fused[:, 10:])) > 0


@pytest.mark.parametrize("attention", ["fused", "naive"])
def test_prefill_then_decode_matches_naive_full_forward(attention):
    """Prefill 8 tokens, decode 4 (the cache carried between donated steps), against one naive
    forward pass over all 12: fp32, so to rounding."""
    cfg = workloads.make_config("llama_decode", "tiny", {"dtype": "f32", "B": "4", "S": "16",
                                                         "attention": attention})
    mesh = make_mesh("4x2")
    params = serve.host_params(cfg)
    toks = np.random.default_rng(3).integers(0, cfg.V, (cfg.B, 12), dtype=np.int32)
    want = _forward(params, toks, "naive", jnp.float32)[:, 7:]
    prefill, _ = serve.build_prefill(dataclasses.replace(cfg, T=8), mesh)
    decode, _ = serve.build_decode(cfg, mesh)
    logits, cache = prefill(params, toks[:, :8])
    got = [np.asarray(logits)]
    for pos in range(8, 12):
        args = (params, cache, toks[:, pos:pos + 1], np.int32(pos))
        out = decode(*args)
        cache = serve.carry_cache(args, out)[1]   # the cache passed in was donated
        got.append(np.asarray(out[0]))
    np.testing.assert_allclose(np.stack(got, 1), want, rtol=1e-4, atol=1e-4)


def test_decode_cache_is_donated_and_updated_in_place():
    """The compiled decode aliases the cache arguments to the cache results, and needs no second
    cache: its scratch memory stays below one of K or V (8 layers, so one layer's K and V read
    for attention is a quarter of that). fp32: XLA:CPU computes bf16 updates through fp32
    copies, a CPU artifact."""
    cfg = workloads.make_config("llama_decode", "tiny", {"dtype": "f32", "L": "8", "B": "4",
                                                         "S": "1024"})
    fn, args = serve.build_decode(cfg, None)
    compiled = fn.lower(*args).compile()
    n_params = len(jax.tree.leaves(args[0]))
    header = compiled.as_text().split("\n", 1)[0]
    # outputs {1}, {2} (the cache dict's k, v) alias parameters n_params, n_params + 1
    assert re.findall(r"\{(\d+)\}: \((\d+), \{\}", header) == [("1", str(n_params)),
                                                                ("2", str(n_params + 1))]
    one_kv = 8 * 4 * 1024 * cfg.K * cfg.H * 4   # L * B * S * K * H * 4 bytes
    assert args[1]["k_LBKSH"].nbytes == one_kv
    assert compiled.memory_analysis().temp_size_in_bytes < one_kv
    # and the donated step runs twice with the cache carried
    out = fn(*args)
    args = serve.carry_cache(args, out)
    out = fn(*args)
    assert out[1]["k_LBKSH"].shape == (8, 4, cfg.K, 1024, cfg.H)


@pytest.mark.parametrize("attention", ["fused", "naive"])
def test_decode_reads_the_cache_without_transposing_it(attention):
    """Cache [L, B, K, S, H]: each layer's K and V feed the attention dots as they lie. With
    [L, B, S, K, H] XLA transposed both, every layer, every step (seen in this HLO before)."""
    B, S = 2, 96
    cfg = workloads.make_config("llama_decode", "tiny", {"dtype": "f32", "B": str(B), "S": str(S),
                                                         "attention": attention})
    fn, args = serve.build_decode(cfg, None)
    text = fn.lower(*args).compile().as_text()
    moved = re.findall(r"= f32\[([\d,]+)\]\S* (?:transpose|copy)\(", text)
    layer_kv = sorted((B, cfg.K, S, cfg.H))
    assert [m for m in moved if sorted(map(int, m.split(","))) == layer_kv] == []


# --- memory need per device --------------------------------------------------------------------

def test_memory_need_by_hand():
    from workloads.llama import memory

    cfg = train.PRESETS["tiny"]   # bf16 params, fp32 moments
    P = model.count_params(model.abstract_params(dims_of(cfg)))
    need = memory.train_bytes(cfg)
    assert (need["parameters"], need["gradients"], need["optimizer"]) == (2 * P, 2 * P, 8 * P)
    # 8B decode (B=32, S=8192): K and V of 32 layers x 8 heads x 128 dims, bf16, per token
    dec = workloads.get("llama_decode")
    cfg = dec.presets["8b"]
    need = dec.memory(cfg, None)
    assert need["kv_cache"] == 2 * 32 * 8 * 128 * 2 * 32 * 8192
    assert memory.total(need) < 80e9          # fits one 80 GB GPU with one copy of the cache
    # dp_tp on 4x2: cache split over batch (4) and KV heads (2); weights over the model axis
    cfg = dec.presets["tiny"]
    split = dec.memory(cfg, make_mesh("4x2"))
    whole = dec.memory(cfg, None)
    assert split["kv_cache"] == whole["kv_cache"] / 8
    assert split["parameters"] == whole["parameters"] / 2


def test_memory_need_matches_xla_arguments():
    """XLA's argument bytes for a decode step are the weights, the cache, the tokens and the
    slot: the analytic parameter and cache terms must add up to them exactly."""
    cfg = workloads.make_config("llama_decode", "tiny", {"dtype": "f32", "S": "64"})
    fn, args = serve.build_decode(cfg, None)
    analysis = fn.lower(*args).compile().memory_analysis()
    need = workloads.get("llama_decode").memory(cfg, None)
    assert need["parameters"] + need["kv_cache"] + cfg.B * 4 + 4 == \
        analysis.argument_size_in_bytes
