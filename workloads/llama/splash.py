"""Causal grouped-query attention on TPU as MaxText runs it: Pallas splash attention.

``jax.experimental.pallas.ops.tpu.splash_attention`` is a flash-attention kernel written in Pallas
(Mosaic): the T x S scores are computed block by block in VMEM and never reach HBM, fully masked
blocks are skipped (so a causal mask does about half the work, `transformers.md`), and GQA is
native (Q [N, T, H] over K/V [K, S, H], query head n reading KV head n // G). The backward pass
is two more kernels: ``dq`` and ``dkv``. Each compiles to one ``tpu_custom_call`` named after the
kernel (``splash_mha_fwd_residuals``, ``splash_mha_dq_no_residuals``, ...), which
``harness.hlo.splash`` prices from its operand shapes.

How MaxText calls it (AI-Hypercomputer/maxtext at e591f30cbbf217ed67ef71263ec0538239f9c3b8,
``src/maxtext/layers/attention_op.py``, ``tpu_flash_attention``, and
``src/maxtext/configs/base.yml``), which this module follows:

- chosen for training and prefill on TPU (``attention: autoselected``, sequences of 128 tokens or
  more); decode attends over a cache with XLA's dot-product attention;
- a ``CausalMask`` repeated over the query heads (``MultiHeadMask``), built with
  ``make_splash_mha`` inside a ``shard_map`` (batch over the data/FSDP axes, heads over the
  tensor axis) and ``vmap``-ed over the local batch; Q, K, V laid out [B, heads, T, H];
- every block size 512 (``sa_block_q``, ``sa_block_kv``, ``sa_block_kv_compute``,
  ``sa_block_q_dkv``, ``sa_block_kv_dkv``, ``sa_block_kv_dkv_compute``, ``sa_block_q_dq``,
  ``sa_block_kv_dq``), capped at the sequence length; separate dq and dkv backward kernels
  (``sa_use_fused_bwd_kernel: false``), head dim minor layouts (``Blocks``: the config's
  ``splash_block`` and ``splash_fused_bwd`` change the first two, as MaxText's tuned recipes do);
- the kernel's residuals named ``"context"`` (``residual_checkpoint_name``), so a remat policy
  can save or recompute them (``workloads.llama.remat``);
- the query scaled by 1/sqrt(H) before the kernel (splash does not scale the scores).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

LANES = 128       # a block must be a multiple of the TPU's 128 lanes (splash checks it)
MIN_T = 128       # MaxText: sequences shorter than this use dot-product attention
CONTEXT = "context"   # MaxText's checkpoint name for the kernel's residuals (output, logsumexp)


@dataclass(frozen=True)
class Blocks:
    """Splash's block size (every sa_block_*) and whether dQ is computed in the dK/dV kernel
    (``sa_use_fused_bwd_kernel``). MaxText's defaults: 512 and no; its tuned v6e recipes (the
    tpu-recipes repository) use 2048 and yes."""

    size: int = 512
    fused_bwd: bool = False

    def size_for(self, T: int) -> int | None:
        """The block for T tokens: ``size`` capped at T, or the largest multiple of 128 below
        that divides T (splash needs T a multiple of its block); None when no block fits."""
        if T < MIN_T or T % LANES:
            return None
        return next(b for b in range(min(self.size, T), 0, -LANES) if T % b == 0)


MAXTEXT = Blocks()


def applies(q_BTNH, causal: bool, blocks: Blocks = MAXTEXT) -> bool:
    """Splash takes causal self-attention over at least 128 tokens, a multiple of 128."""
    return causal and blocks.size_for(q_BTNH.shape[1]) is not None


def _block_sizes(T: int, blocks: Blocks):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    b = blocks.size_for(T)
    dq = None if blocks.fused_bwd else b   # the fused kernel takes no dq blocks
    return sk.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                         block_kv_dkv=b, block_kv_dkv_compute=b, block_q_dq=dq, block_kv_dq=dq,
                         use_fused_bwd_kernel=blocks.fused_bwd)


def _local(q_BTNH, k_BSKH, v_BSKH, blocks: Blocks, interpret: bool):
    """Splash on one device's shard: [B, T, N, H] queries over [B, S, K, H] keys and values."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    _, T, N, H = q_BTNH.shape
    mask = sm.MultiHeadMask([sm.CausalMask((T, k_BSKH.shape[1]))] * N)
    kernel = sk.make_splash_mha(mask, block_sizes=_block_sizes(T, blocks), head_shards=1,
                                q_seq_shards=1, residual_checkpoint_name=CONTEXT,
                                interpret=interpret)
    to_heads = functools.partial(jnp.swapaxes, axis1=1, axis2=2)   # [B, T, n, H] -> [B, n, T, H]
    q = to_heads(q_BTNH * jnp.asarray(H ** -0.5, q_BTNH.dtype))
    o_BNTH = jax.vmap(kernel)(q, to_heads(k_BSKH), to_heads(v_BSKH))
    return to_heads(o_BNTH)


def attention(q_BTNH, k_BSKH, v_BSKH, sh, blocks: Blocks = MAXTEXT, interpret: bool = False):
    """Causal GQA by splash attention, per device under ``shard_map`` on ``sh.mesh`` (directly
    when unsharded). ``interpret=True`` runs the kernel in Pallas' interpreter (any backend).

    Q is [B_batch, T, N_model, H]; K/V [B_batch, S, K_model, H], where K_model is K split over
    the model axes or, when the model axes outnumber the KV heads, the heads repeated up to them
    (``Sharder.kv_repeat``): either way each device's query heads read its own KV heads."""
    local = functools.partial(_local, blocks=blocks, interpret=interpret)
    if sh.mesh is None:
        return local(q_BTNH, k_BSKH, v_BSKH)
    spec = P(sh.batch, None, sh.model, None)
    mesh, axes = _mesh_here(sh.mesh)
    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec,
                         axis_names=axes, check_vma=False)(q_BTNH, k_BSKH, v_BSKH)


def _mesh_here(mesh):
    """The mesh and axes of splash's ``shard_map``: ``mesh``'s, or inside a ``shard_map``
    already manual over some axes (a pipeline's stage loop) the context's abstract mesh and
    the axes still automatic there (jax 0.10: a nested ``shard_map`` must name the context's
    mesh)."""
    here = jax.sharding.get_abstract_mesh()
    manual = set(getattr(here, "manual_axes", ()) or ())
    if not manual:
        return mesh, frozenset()
    return here, frozenset(a for a in here.axis_names if a not in manual)
