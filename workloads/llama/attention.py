"""Grouped-query attention, computed as the field's best public code computes it on each backend
(``fused``: Pallas splash attention on TPU, cuDNN flash attention on GPU, XLA's elsewhere) or by
hand (``naive``): ``ATTENTION`` names each, ``attention`` picks one by the config's name.
"""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

from workloads.llama import splash
from workloads.llama.attention_seq import seq_attention
from workloads.llama.remat import name
from workloads.llama.sharding import Sharder

log = logging.getLogger(__name__)


def naive_attention(q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh: Sharder, blocks=None):
    """The hand-written grouped-query attention: query head n uses KV head n // G.

    Key s is visible to query t iff s <= q_pos[t] (with ``q_pos_BT=None`` the T queries sit at
    positions [0, T) over their own T keys: causal). Scores [B, K, G, T, S] are materialised in
    fp32, masked with -inf and softmaxed (no kernel blocks: ``blocks`` is unused).
    """
    B, T, N, H = q_BTNH.shape
    S, K = k_BSKH.shape[1], k_BSKH.shape[2]
    if q_pos_BT is None:
        q_pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    q = q_BTNH.reshape(B, T, K, N // K, H)
    s_BKGTS = jnp.einsum("btkgh,bskh->bkgts", q, k_BSKH,
                         preferred_element_type=jnp.float32) * (H ** -0.5)
    visible_BTS = jnp.arange(S)[None, None, :] <= q_pos_BT[:, :, None]
    s_BKGTS = jnp.where(visible_BTS[:, None, None], s_BKGTS, -jnp.inf)
    p = jax.nn.softmax(s_BKGTS, axis=-1).astype(v_BSKH.dtype)
    o = jnp.einsum("bkgts,bskh->btkgh", p, v_BSKH)
    return name(o.reshape(B, T, N, H), splash.CONTEXT)


def _platform(sh: Sharder) -> str:
    """The platform the mesh's devices are on (an AbstractMesh has none: the default backend)."""
    if isinstance(sh.mesh, jax.sharding.Mesh):
        return sh.mesh.devices.flat[0].platform
    return jax.default_backend()


def fused_implementation(q_BTNH, causal: bool, sh: Sharder,
                         blocks: splash.Blocks = splash.MAXTEXT) -> str:
    """How ``fused_attention`` computes, per backend, as the field's best public code does:
    ``"splash"`` (Pallas splash attention, ``workloads.llama.splash``, as MaxText runs it) on a
    TPU for causal self-attention over 128 tokens or more, a multiple of 128; ``"cudnn"`` (flash
    attention) on a GPU where cuDNN takes the shape: bf16/fp16, head dim a multiple of 8 and at
    most 128, causal self-attention (training, prefill); ``"xla"`` elsewhere: CPU, and decode
    (one query over the cache is memory-bound, reference §7.2). ``implementation=None`` would be
    XLA on every backend in jax 0.10, so this picks."""
    platform = _platform(sh)
    if platform == "tpu" and splash.applies(q_BTNH, causal, blocks):
        return "splash"
    H = q_BTNH.shape[-1]
    ok = q_BTNH.dtype in (jnp.bfloat16, jnp.float16) and H % 8 == 0 and H <= 128
    return "cudnn" if causal and ok and platform == "gpu" else "xla"


def fused_attention(q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh: Sharder,
                    blocks: splash.Blocks = splash.MAXTEXT):
    """``jax.nn.dot_product_attention`` (splash attention on TPU, in ``blocks``): K/V keep their
    K heads (GQA without repeating them), causal by flag for ``q_pos_BT=None``, else a
    [B, 1, T, S] mask ``s <= q_pos[t]``."""
    causal = q_pos_BT is None
    impl = fused_implementation(q_BTNH, causal, sh, blocks)
    if impl == "splash":
        return splash.attention(q_BTNH, k_BSKH, v_BSKH, sh, blocks)
    mask = None
    if not causal:
        S = k_BSKH.shape[1]
        mask = (jnp.arange(S)[None, None, :] <= q_pos_BT[:, :, None])[:, None]
    try:
        o = jax.nn.dot_product_attention(q_BTNH, k_BSKH, v_BSKH, mask=mask, is_causal=causal,
                                         implementation=impl)
    except (ValueError, NotImplementedError, RuntimeError) as e:  # cuDNN refused the shape
        if impl == "xla":
            raise
        log.warning("cuDNN attention unavailable (%s); using XLA's", e)
        o = jax.nn.dot_product_attention(q_BTNH, k_BSKH, v_BSKH, mask=mask, is_causal=causal,
                                         implementation="xla")
    return name(o, splash.CONTEXT)   # splash names its own residuals so


ATTENTION = {"fused": fused_attention, "naive": naive_attention}


def attention(q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh: Sharder, impl: str = "fused",
              blocks: splash.Blocks = splash.MAXTEXT):
    """Grouped-query attention by ``impl`` (``ATTENTION``); ``q_pos_BT=None`` is causal
    self-attention, otherwise queries at positions ``q_pos_BT`` over S cache slots: over a
    sequence-sharded cache (``Sharder.kv_seq``) those combine flash-style (``attention_seq``)."""
    if q_pos_BT is not None and sh.kv_seq is not None:
        with jax.named_scope("attention"):
            return seq_attention(q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh)
    if sh.kv_repeat > 1 and k_BSKH.shape[2] == sh.dims.K:
        # KV replicated past K-way: repeat heads so K' = K·r splits evenly (a cache read
        # holds them repeated already: kv_cache.stored)
        k_BSKH = jnp.repeat(k_BSKH, sh.kv_repeat, axis=2)
        v_BSKH = jnp.repeat(v_BSKH, sh.kv_repeat, axis=2)
    with jax.named_scope("attention"):   # the report's attention category (harness.hlo)
        return ATTENTION[impl](q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh, blocks)
