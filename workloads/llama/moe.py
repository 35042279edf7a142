"""The routed MLP of a mixture-of-experts layer (`transformers.md` "Sparsity and Mixture-of-
Experts", `gpus.md` "Expert parallelism"; reference §5.4, §6.2), written the way MaxText and
the public JAX MoE code run it (read, not copied):

- Router: fp32 logits h·W_router[D, E] (``router_bias`` added to expert 0's), softmax, the top
  k experts, their weights renormalised to sum to 1 (Mixtral's routing).
- Load-balancing loss (Switch Transformer, GShard): E · sum_e f_e · P_e, f_e the share of the
  token-choices routed to expert e and P_e its mean router probability, over the global batch.
- Experts: SwiGLU MLPs W_gate, W_up[E, D, F], W_down[E, F, D], plus an always-on shared expert
  (``shared_experts=1``, DeepSeek and LLaMA-4) of the same width.
- ``experts_impl`` (``IMPLS``): "capacity" gathers each group's tokens into [E, C, D] buffers,
  C = ceil(capacity_factor · n · k / E) for the n tokens of a group (a device's), first choices
  first (GShard's priority), the token-choices past C dropped; "ragged" and "tiled" are
  dropless: the token-choices sorted by expert and run as grouped matmuls
  (``workloads.llama.moe_gmm``).

Expert parallelism: the experts over the layout's ``expert`` mesh axes (Z devices, E/Z experts
each), which also split the batch. The layer runs in a ``shard_map`` manual over every mesh
axis: each device routes its own n tokens; dispatch and combine are one ``all_to_all`` each
over the expert axes. "capacity" sends its [E, C, D] buffer (E·C·D elements each way);
dropless sends to each of the Z devices a buffer padded to the worst case, n · min(k, E/Z)
rows (Z · n · min(k, E/Z) · D elements each way, and the group sizes beside it), as the CPU
has no ``ragged_all_to_all`` (jax 0.10.2 has the op, XLA:CPU does not implement it; on TPU and
GPU it would send tokens·k·D). FSDP gathers the expert weights' D over its axes in the layer
(``all_gather``; its transpose reduce-scatters the gradients); tensor parallelism splits F:
the input is gathered over the model axes and the output reduce-scattered back to [B, T, D_Y].

The layer returns its output and its routing (``ROUTING``): tokens per expert (token-choices
routed to each, before any drop), dropped token-choices, and the balance loss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.llama import moe_dispatch
from workloads.llama.remat import name

# the routing a MoE layer returns (per layer; stacked over layers by the layer loop)
ROUTING = {
    "tokens_per_expert_E": "token-choices routed to each expert (before any drop), global",
    "dropped": "token-choices past their expert's capacity, dropped (0 when dropless)",
    "balance_loss": "E · sum_e f_e · P_e (Switch Transformer), over the global batch",
}


@dataclass(frozen=True)
class Axes:
    """The mesh axes the layer's collectives run over (empty: unsplit), and Z, the expert
    axes' devices."""

    expert: tuple[str, ...] = ()
    batch: tuple[str, ...] = ()
    fsdp: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    Z: int = 1


def axes_of(sh) -> Axes:
    """The Sharder's layout as the layer's collective axes."""
    if sh.mesh is None:
        return Axes()
    lay = sh.layout
    sizes = dict(zip(sh.mesh.axis_names, sh.mesh.axis_sizes))
    return Axes(lay.expert, lay.batch, lay.fsdp, lay.model,
                math.prod(sizes[a] for a in lay.expert))


capacity = moe_dispatch.capacity_of


def _psum(x, axes: tuple[str, ...]):
    return jax.lax.psum(x, axes) if axes else x


def _gather(x, axes: tuple[str, ...], dim: int):
    return jax.lax.all_gather(x, axes, axis=dim, tiled=True) if axes else x


def _dense(w, dtype):
    """A weight as a float array (an int8 one dequantised by its per-channel scale)."""
    if not isinstance(w, dict):
        return w
    scale = w["scale"]
    shape = scale.shape[:1] + (1,) + scale.shape[1:] if w["q8"].ndim == 3 else (1,) + scale.shape
    return w["q8"].astype(dtype) * scale.reshape(shape).astype(dtype)


def route(x_nD, w_router_DE, d, ax: Axes):
    """Top-k routing: (expert ids [n, k], weights [n, k], local counts [E], balance loss)."""
    logits = jnp.dot(x_nD.astype(jnp.float32), w_router_DE.astype(jnp.float32))
    logits = logits.at[:, 0].add(d.router_bias)
    probs = jax.nn.softmax(logits, axis=-1)
    top, idx = jax.lax.top_k(probs, d.k)
    gate = top / jnp.sum(top, axis=-1, keepdims=True)
    counts_E = jnp.sum(jax.nn.one_hot(idx, d.E, dtype=jnp.int32), axis=(0, 1))
    n = _psum(jnp.asarray(x_nD.shape[0], jnp.float32), ax.batch)
    f_E = _psum(counts_E.astype(jnp.float32), ax.batch) / (n * d.k)
    p_E = _psum(jnp.sum(probs, axis=0), ax.batch) / n
    return idx, gate.astype(x_nD.dtype), counts_E, d.E * jnp.sum(f_E * p_E)


def _gathered(w: dict, specs: dict, ax: Axes, dtype) -> dict:
    """The layer's weights with their FSDP-split dims gathered, as float arrays."""
    def full(x, spec):
        for dim, entry in enumerate(spec):
            names = (entry,) if isinstance(entry, str) else tuple(entry or ())
            x = _gather(x, tuple(a for a in names if a in ax.fsdp), dim)
        return x
    out = {}
    for key, leaf in w.items():
        if isinstance(leaf, dict):   # int8: {"q8", "scale"}, the scale keeps no D
            out[key] = _dense({"q8": full(leaf["q8"], specs[key]["q8"]),
                               "scale": leaf["scale"]}, dtype)
        else:
            out[key] = full(leaf, specs[key])
    return out


def _local(h_bTD, w, specs, d, ax: Axes):
    """One device's share of the layer (inside the ``shard_map``, or the whole unsplit)."""
    b, T = h_bTD.shape[:2]
    x_nD = _gather(h_bTD, ax.model, 2).reshape(b * T, -1)
    w = _gathered(w, specs, ax, x_nD.dtype)
    idx, gate, counts_E, balance = route(x_nD, w["router_DE"], d, ax)
    y_nD, dropped = moe_dispatch.IMPLS[d.experts_impl](x_nD, idx, gate, w, d, ax)
    if d.shared_experts:
        g = name(jnp.dot(x_nD, w["w_gate_DF"]), "mlpwi_0")
        u = name(jnp.dot(x_nD, w["w_up_DF"]), "mlpwi_1")
        y_nD = y_nD + jnp.dot(jax.nn.silu(g) * u, w["w_down_FD"])
    y = y_nD.reshape(b, T, -1)
    if ax.model:   # partial sums over F's shards: reduce-scatter back to [b, T, D_Y]
        y = jax.lax.psum_scatter(y, ax.model, scatter_dimension=2, tiled=True)
    routing = {"tokens_per_expert_E": _psum(counts_E, ax.batch),
               "dropped": _psum(dropped, ax.batch), "balance_loss": balance}
    return y, routing


def moe_mlp(h_BTD, w: dict, d, sh):
    """The routed MLP of one layer: ``(y [B, T, D], routing)`` (module docstring)."""
    keys = [k for k in w if k in EXPERT_PARAMS or (d.shared_experts and k in SHARED_PARAMS)]
    w = {k: w[k] for k in keys}
    specs = {k: _layer_spec(sh, k, w[k]) for k in keys}
    if sh.mesh is None:
        return _local(h_BTD, w, specs, d, Axes())
    ax = axes_of(sh)
    body = lambda h, w_: _local(h, w_, specs, d, ax)  # noqa: E731
    routing_specs = {k: P() for k in ROUTING}
    return jax.shard_map(body, mesh=sh.mesh, in_specs=(sh.spec("BTD"), specs),
                         out_specs=(sh.spec("BTD"), routing_specs), check_vma=False)(h_BTD, w)


def _layer_spec(sh, key: str, leaf):
    """One layer's weight spec (the stacked spec without its leading L); int8: per part."""
    if sh.mesh is None:
        return {"q8": P(), "scale": P()} if isinstance(leaf, dict) else P()
    spec = P(*tuple(sh.param_spec(key))[1:])
    if isinstance(leaf, dict):
        return {"q8": spec, "scale": P(*tuple(sh.scale_spec(key))[1:])}
    return spec


EXPERT_PARAMS = ("router_DE", "w_gate_EDF", "w_up_EDF", "w_down_EFD")
SHARED_PARAMS = ("w_gate_DF", "w_up_DF", "w_down_FD")
