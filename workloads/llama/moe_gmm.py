"""Grouped matmuls of a MoE layer's experts: rows sorted by expert, ``group_sizes[g]`` rows each
(reference §5.4: the routed FLOPs are 2·tokens·k·D·F per matrix).

- ``ragged``: ``jax.lax.ragged_dot``, as MaxText's megablox path. On TPU (libtpu) and GPU it
  computes each group against its own expert; in jax 0.10.2 on CPU it lowers to one dense dot
  of every row against every expert (the rows masked per expert into [m, G·K], then
  [m, G·K] x [G·K, N]): 2·m·G·K·N FLOPs for 2·m·K·N routed, G times the work, and its time
  does not follow the routing.
- ``tiled``: a ``lax.while_loop`` over tiles of ``tile`` rows of each group, as megablox tiles
  its grid: the trip count is sum_g ceil(group_sizes[g] / tile), so the time follows the
  tokens each expert got (an expert with most of the tokens makes its devices the
  stragglers). Its backward is two more such loops (``custom_vjp``): dx by the transposed
  experts, dW by each tile's x^T·dy. XLA's cost_analysis counts a while body once: one tile,
  2·tile·K·N FLOPs per matrix, whatever the trip count.

Rows beyond sum(group_sizes) (padding) come out zero in both.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp


def ragged(x_mK, w_GKN, group_sizes_G, tile: int = 0):
    """``y[r] = x[r] @ w[g(r)]`` for the rows of group g (``jax.lax.ragged_dot``)."""
    return jax.lax.ragged_dot(x_mK, w_GKN, group_sizes_G)


def _tiles(group_sizes_G, tile: int):
    """Per group: its first row, its tile count, and the running total of tiles."""
    starts = jnp.cumsum(group_sizes_G) - group_sizes_G
    n_tiles = (group_sizes_G + tile - 1) // tile
    return starts, n_tiles, jnp.cumsum(n_tiles)


def _over_tiles(group_sizes_G, tile: int, body, init):
    """``body(acc, g, first_row, valid_rows) -> acc`` for every tile of every group, in order;
    the loop runs sum_g ceil(group_sizes[g] / tile) times."""
    starts, n_tiles, ends = _tiles(group_sizes_G, tile)

    def step(carry):
        i, acc = carry
        g = jnp.searchsorted(ends, i, side="right")
        j = i - (ends[g] - n_tiles[g])
        r0 = starts[g] + j * tile
        valid = jnp.arange(tile) < starts[g] + group_sizes_G[g] - r0
        return i + 1, body(acc, g, r0, valid)

    total = ends[-1]
    return jax.lax.while_loop(lambda c: c[0] < total, step, (jnp.zeros((), total.dtype), init))[1]


def _rows(x, r0, tile: int):
    return jax.lax.dynamic_slice_in_dim(x, r0, tile, 0)


def _loop_gmm(x_mK, w_GKN, group_sizes_G, tile: int):
    m, N = x_mK.shape[0], w_GKN.shape[2]
    x_pad = jnp.pad(x_mK, ((0, tile), (0, 0)))     # a last tile never reads past the end

    def body(y, g, r0, valid):
        w_KN = jax.lax.dynamic_index_in_dim(w_GKN, g, 0, keepdims=False)
        part = jnp.dot(_rows(x_pad, r0, tile), w_KN, preferred_element_type=jnp.float32)
        part = jnp.where(valid[:, None], part, 0.0).astype(y.dtype)
        return jax.lax.dynamic_update_slice_in_dim(y, _rows(y, r0, tile) + part, r0, 0)

    y = _over_tiles(group_sizes_G, tile, body, jnp.zeros((m + tile, N), x_mK.dtype))
    return y[:m]


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _tiled(x_mK, w_GKN, group_sizes_G, tile: int):
    return _loop_gmm(x_mK, w_GKN, group_sizes_G, tile)


def _tiled_fwd(x_mK, w_GKN, group_sizes_G, tile: int):
    return _loop_gmm(x_mK, w_GKN, group_sizes_G, tile), (x_mK, w_GKN, group_sizes_G)


def _tiled_bwd(tile: int, res, dy_mN):
    x_mK, w_GKN, group_sizes_G = res
    dx = _loop_gmm(dy_mN, jnp.swapaxes(w_GKN, 1, 2), group_sizes_G, tile)
    x_pad = jnp.pad(x_mK, ((0, tile), (0, 0)))
    dy_pad = jnp.pad(dy_mN, ((0, tile), (0, 0)))

    def body(dw, g, r0, valid):
        x_t = jnp.where(valid[:, None], _rows(x_pad, r0, tile), 0)
        part = jnp.dot(x_t.T, _rows(dy_pad, r0, tile), preferred_element_type=jnp.float32)
        cur = jax.lax.dynamic_index_in_dim(dw, g, 0, keepdims=True)
        return jax.lax.dynamic_update_index_in_dim(dw, cur + part[None], g, 0)

    dw = _over_tiles(group_sizes_G, tile, body, jnp.zeros(w_GKN.shape, jnp.float32))
    return dx.astype(x_mK.dtype), dw.astype(w_GKN.dtype), None


_tiled.defvjp(_tiled_fwd, _tiled_bwd)


def tiled(x_mK, w_GKN, group_sizes_G, tile: int = 8):
    """``ragged``'s result by a loop over ``tile``-row tiles of each group (module docstring)."""
    return _tiled(x_mK, w_GKN, group_sizes_G.astype(jnp.int32), tile)


# experts_impl -> the grouped matmul its dropless path runs ("capacity" runs dense einsums)
GROUPED = {"ragged": ragged, "tiled": tiled}


def trips(group_sizes_G, tile: int) -> int:
    """The tiled loop's trip count for these group sizes: sum_g ceil(g / tile) (host ints)."""
    return sum(-(-int(g) // tile) for g in group_sizes_G)
