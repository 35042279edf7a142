"""Dispatch, expert compute and combine of a MoE layer on one device (``workloads.llama.moe``):
``IMPLS[experts_impl](x [n, D], expert ids [n, k], weights [n, k], w, d, axes) -> (y [n, D],
dropped)``. Dispatch and combine are one ``all_to_all`` each over the expert axes (none when
the experts are not split); the output is a partial sum over the model axes where F is split.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from workloads.llama import moe_gmm
from workloads.llama.remat import name


def _all_to_all(x, ax, split: int, concat: int):
    """Chunk ``split`` of ``x`` goes to expert device i; what comes back is stacked on
    ``concat`` (``tiled``: [Z·a, ...] -> [a, Z·...])."""
    if not ax.expert:
        return x
    return jax.lax.all_to_all(x, ax.expert, split, concat, tiled=True)


def _experts_dense(x_ECD, w):
    """SwiGLU of every expert on its [C, D] buffer (`transformers.md`: 3 matrices, 2·C·D·F
    FLOPs each per expert)."""
    g = name(jnp.einsum("ecd,edf->ecf", x_ECD, w["w_gate_EDF"]), "mlpwi_0")
    u = name(jnp.einsum("ecd,edf->ecf", x_ECD, w["w_up_EDF"]), "mlpwi_1")
    return name(jnp.einsum("ecf,efd->ecd", jax.nn.silu(g) * u, w["w_down_EFD"]), "mlpwo")


def _experts_grouped(x_mD, w, group_sizes, d):
    """SwiGLU of each expert on its rows of ``x_mD`` (sorted by expert): grouped matmuls."""
    gmm = moe_gmm.GROUPED[d.experts_impl]
    g = name(gmm(x_mD, w["w_gate_EDF"], group_sizes, d.expert_tile), "mlpwi_0")
    u = name(gmm(x_mD, w["w_up_EDF"], group_sizes, d.expert_tile), "mlpwi_1")
    return name(gmm(jax.nn.silu(g) * u, w["w_down_EFD"], group_sizes, d.expert_tile), "mlpwo")


def capacity_of(d, n: int) -> int:
    """C: token-choices each expert takes from a group of n tokens, ceil(factor · n · k / E)
    (GShard's capacity)."""
    return max(1, math.ceil(d.capacity_factor * n * d.k / d.E))


def capacity(x_nD, idx_nk, gate_nk, w, d, ax):
    """Token dropping: [E, C, D] buffers, the token-choices past C dropped (GShard)."""
    n, D = x_nD.shape
    C = capacity_of(d, n)
    a = idx_nk.T.reshape(-1)                       # choice-major: first choices first
    tok = jnp.tile(jnp.arange(n), d.k)
    onehot = jax.nn.one_hot(a, d.E, dtype=jnp.int32)
    pos = jnp.sum(jnp.cumsum(onehot, axis=0) * onehot, axis=-1) - 1
    keep = pos < C
    buf = jnp.zeros((d.E, C, D), x_nD.dtype).at[a, pos].set(x_nD[tok], mode="drop")
    buf = _all_to_all(buf, ax, 0, 1)              # dispatch: [E/Z, Z·C, D]
    out = _all_to_all(_experts_dense(buf, w), ax, 1, 0)   # combine: [E, C, D]
    weight = jnp.where(keep, gate_nk.T.reshape(-1), 0).astype(out.dtype)
    y = out[a, jnp.minimum(pos, C - 1)] * weight[:, None]
    return jnp.sum(y.reshape(d.k, n, D), axis=0), jnp.sum(~keep).astype(jnp.int32)


def dropless(x_nD, idx_nk, gate_nk, w, d, ax):
    """Every token-choice computed: sorted by expert, sent to its expert's device in a buffer
    padded to n · min(k, E/Z) rows, run as grouped matmuls there, and sent back."""
    n, D = x_nD.shape
    Z, E_l = ax.Z, d.E // ax.Z
    a = idx_nk.reshape(-1)                          # token-major [n·k]
    order = jnp.argsort(a, stable=True)
    a_s, tok_s = a[order], order // d.k
    counts_E = jnp.sum(jax.nn.one_hot(a, d.E, dtype=jnp.int32), axis=0)
    if Z == 1:
        y_s = _experts_grouped(x_nD[tok_s], w, counts_E, d)
    else:
        y_s = _exchange(x_nD[tok_s], a_s, counts_E, w, d, ax, n * min(d.k, E_l), E_l)
    y = y_s[jnp.argsort(order)] * gate_nk.reshape(-1)[:, None]
    return jnp.sum(y.reshape(n, d.k, D), axis=1), jnp.zeros((), jnp.int32)


def _exchange(rows_mD, a_s, counts_E, w, d, ax, C_dev: int, E_l: int):
    """Dispatch the expert-sorted rows to their experts' devices, compute, combine back."""
    Z, D = ax.Z, rows_mD.shape[1]
    dev = a_s // E_l
    dev_counts = jnp.sum(counts_E.reshape(Z, E_l), axis=1)
    pos = jnp.arange(a_s.shape[0]) - (jnp.cumsum(dev_counts) - dev_counts)[dev]
    send = jnp.zeros((Z, C_dev, D), rows_mD.dtype).at[dev, pos].set(rows_mD)
    recv = _all_to_all(send, ax, 0, 0)              # dispatch: [Z sources, C_dev, D]
    got = _all_to_all(counts_E.reshape(Z, E_l), ax, 0, 0)   # [Z sources, E/Z] group sizes
    ends = jnp.cumsum(got, axis=1)
    expert = jnp.sum(jnp.arange(C_dev)[None, :, None] >= ends[:, None, :], axis=-1)
    order = jnp.argsort(expert.reshape(-1), stable=True)   # padding (id E/Z) sorts last
    out = _experts_grouped(recv.reshape(Z * C_dev, D)[order], w, jnp.sum(got, axis=0), d)
    out = out[jnp.argsort(order)].reshape(Z, C_dev, D)
    back = _all_to_all(out, ax, 0, 0)               # combine: [Z destinations, C_dev, D]
    return back[dev, pos]


IMPLS = {"capacity": capacity, "ragged": dropless, "tiled": dropless}
