"""Decode attention over a sequence-sharded KV cache (``dp_tp_kv_seq``; `inference.md` §7.4,
reference §7.4: "shard the cache along the sequence, AllGather Q and combine flash-style").

The cache is KV[2, B_X, S_Z, K_Y, H]: the model axes cut as for the batch-sharded cache
(``sharding.batch_kv_mesh``), the leading ones for the K heads and the rest, Z = Y/K of them,
for the sequence, so device (k, z) holds slots [z·S/Z, (z+1)·S/Z) of KV head k. Per layer, under
``shard_map`` on the cut mesh:

1. AllGather the queries over Z: the device's N/Y query heads become its head group's N/K;
2. each device's partial softmax over its S/Z keys, masked by slot ``s <= q_pos``: its maximum
   m_z, then (after an AllReduce (max) of the maxima, m = max_z m_z) its sum of exponentials
   l_z = Σ_s exp(x_s − m) and weighted values o_z = Σ_s exp(x_s − m)·v_s;
3. one AllReduce (sum) of [o_z, l_z] (f32, H + 1 numbers a query head) and o = Σo_z / Σl_z,
   the softmax over all S keys (flash-decoding's combine, with the maxima exchanged first);
4. each device keeps its own N/Y heads of the result: no further collective.

``write`` puts the new tokens' K/V on the device that holds each slot: under ``shard_map``
every device scatters at its local slot ``pos - z·S/Z``, dropped where that falls outside its
S/Z, so the others neither write nor read their slab for it; no collective.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.llama import splash
from workloads.llama.remat import name
from workloads.llama.sharding import Sharder


def _names(axes) -> tuple[str, ...]:
    return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def _local(q_BTNH, k_BKSH, v_BKSH, q_pos_BT, z_axes: tuple[str, ...], Z: int):
    """One device's part: its queries' N/Y heads, its S/Z slots of its K/Y KV heads."""
    q = jax.lax.all_gather(q_BTNH, z_axes, axis=2, tiled=True)   # [B, T, N/K_dev, H]
    B, T, Ng, H = q.shape
    K_l, S_z = k_BKSH.shape[1], k_BKSH.shape[2]
    z = jax.lax.axis_index(z_axes)
    x = jnp.einsum("btkgh,bksh->bkgts", q.reshape(B, T, K_l, Ng // K_l, H), k_BKSH,
                   preferred_element_type=jnp.float32) * (H ** -0.5)
    slot_S = z * S_z + jnp.arange(S_z)
    visible = (slot_S[None, None, :] <= q_pos_BT[:, :, None])[:, None, None]  # [B,1,1,T,S_z]
    x = jnp.where(visible, x, -jnp.inf)
    # slot 0 is visible to every query (q_pos >= 0), so the global maximum is finite
    m = jax.lax.pmax(jnp.max(x, axis=-1), z_axes)
    p = jnp.exp(x - m[..., None])
    o = jnp.einsum("bkgts,bksh->bkgth", p.astype(v_BKSH.dtype), v_BKSH,
                   preferred_element_type=jnp.float32)
    ol = jax.lax.psum(jnp.concatenate([o, jnp.sum(p, axis=-1)[..., None]], axis=-1), z_axes)
    o = (ol[..., :H] / ol[..., H:]).astype(q_BTNH.dtype)
    o_BTNH = jnp.moveaxis(o, 3, 1).reshape(B, T, Ng, H)
    n = Ng // Z   # this device's N/Y heads of its group's N/K
    return jax.lax.dynamic_slice_in_dim(o_BTNH, z * n, n, axis=2)


def seq_attention(q_BTNH, k_BSKH, v_BSKH, q_pos_BT, sh: Sharder):
    """Grouped-query attention of queries at ``q_pos_BT`` over the S-sharded cache, combined
    flash-style over the Z devices that share a KV head (module doc); [B, T, N, H] as the
    queries lie (N over the model axes)."""
    z_axes = _names(sh.kv_seq)
    Z = math.prod(sh.mesh.shape[a] for a in z_axes)
    q_spec = P(sh.batch, None, sh.model, None)
    kv_spec = P(sh.kv_batch, sh.kv, sh.kv_seq, None)
    local = lambda q, k, v, pos: _local(q, k, v, pos, z_axes, Z)  # noqa: E731
    # K/V as the cache stores them, [B, K, S, H] (kv_cache.read's swap undone: no transpose)
    k_BKSH, v_BKSH = (jnp.swapaxes(a, 1, 2) for a in (k_BSKH, v_BSKH))
    o = jax.shard_map(local, mesh=sh.mesh, in_specs=(q_spec, kv_spec, kv_spec, P(sh.batch, None)),
                      out_specs=q_spec, check_vma=False)(q_BTNH, k_BKSH, v_BKSH, q_pos_BT)
    return name(o, splash.CONTEXT)


def _write_local(c: dict, layer, k_BTKH, v_BTKH, pos, z_axes: tuple[str, ...], quantize):
    """One device's slab of the stacked cache with the T new tokens at global slots
    [pos, pos + T) that fall in its S/Z: a scatter whose other indices are dropped (out of
    bounds), so no device reads its slab to write it."""
    S_z = c["k_LBKSH"].shape[3]
    T = k_BTKH.shape[1]
    slot_T = pos - jax.lax.axis_index(z_axes) * S_z + jnp.arange(T)
    slot_T = jnp.where(slot_T < 0, S_z, slot_T)   # out of bounds, not counted from the end
    out = {}
    for nm, x in (("k", k_BTKH), ("v", v_BTKH)):
        parts = dict(zip((f"{nm}_LBKSH", f"{nm}_scale_LBKS"), quantize(x)
                         if f"{nm}_scale_LBKS" in c else (x,)))
        for key, new_BTK in parts.items():
            buf = c[key]
            new = jnp.moveaxis(new_BTK, 1, 0).astype(buf.dtype)   # [T, B, K, ...]
            out[key] = buf.at[layer, :, :, slot_T].set(new, mode="drop")
    return out


def write(c: dict, layer, k_BTKH, v_BTKH, pos, sh: Sharder, quantize) -> dict:
    """The stacked S-sharded cache with the new tokens' K/V (and int8 scales, ``quantize``
    giving (int8 values, scales)) written at slots [pos, pos + T) of ``layer``, on the devices
    that hold them (``_write_local``)."""
    z_axes = _names(sh.kv_seq)
    kv = P(sh.batch, None, sh.kv, None)
    specs = {k: P(None, sh.kv_batch, sh.kv, sh.kv_seq, *([None] * (a.ndim - 4)))
             for k, a in c.items()}
    local = lambda c, k, v, pos, layer: _write_local(c, layer, k, v, pos, z_axes,  # noqa: E731
                                                     quantize)
    return jax.shard_map(local, mesh=sh.mesh, in_specs=(specs, kv, kv, P(), P()),
                         out_specs=specs, check_vma=False)(c, k_BTKH, v_BTKH,
                                                           jnp.asarray(pos, jnp.int32),
                                                           jnp.asarray(layer, jnp.int32))
