"""Partition specs for LLaMA-3 under the registry's layouts (``predictions.layouts``: DP,
FSDP, TP and their compositions; reference §6.1 and §7.4).

A layout names the role of each mesh axis (``data``, ``fsdp``, ``model``) and which roles split
the batch, the weights' D dim (ZeRO-3: gathered just in time, gradients reduce-scattered) and
the heads, F and V (Megatron TP); ``Split`` is that entry on one mesh, as mesh axis names. With
the book's letters, for the MLP on a mesh X x Y:

| layout      | In / residual | W_in       | W_out      | book, `training.md`            |
|-------------|---------------|------------|------------|--------------------------------|
| dp          | [B_XY, D]     | [D, F]     | [F, D]     | DP: gradient AllReduce         |
| fsdp        | [B_XY, D]     | [D_XY, F]  | [F, D_XY]  | FSDP / ZeRO-3                  |
| tp          | [B, D_XY]     | [D, F_XY]  | [F_XY, D]  | TP: AG before W_in, RS after W_out |
| fsdp_tp     | [B_X, D_Y]    | [D_X, F_Y] | [F_Y, D_X] | FSDP + TP on separate axes     |
| dp_tp       | [B_X, D_Y]    | [D, F_Y]   | [F_Y, D]   | replicas x model parallel (§7.4 decode) |

On a mesh named by role (``fsdp=4,model=2``) each axis plays its name's role; on one named X, Y
the roles go by position (``predictions.layouts.axes_by_role``).

Attention follows Megatron: W_Q[D, N_Y, H], W_K/W_V[D, K_Y, H], W_O[N_Y, H, D]. When the model
axes outnumber the KV heads, K/V are replicated beyond K-way (`inference.md`, reference §7.4) and
each KV head is repeated ``kv_repeat`` times so the grouped heads still split evenly. The KV cache
is [B_batch, S, K_model, H], with the repeated heads (K·kv_repeat) where K/V are replicated, so
each device caches its own heads' K/V (1/K of the cache, not all of it); under
``dp_tp_kv_batch`` (``serving_layouts.WORKLOAD_PARALLELISMS``) it is the book's
KV[2, B_Z, S, K_Y, H] (reference §7.4): heads K-way, the batch over the Z = Y/K model devices
that share a head (``batch_kv_mesh``), no K/V repeated; under ``dp_tp_kv_seq`` the same cut puts
the sequence over Z instead, KV[2, B_X, S_Z, K_Y, H] (``attention_seq``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import jax
from jax.sharding import PartitionSpec as P

from predictions import layouts
from predictions.serving_layouts import WORKLOAD_PARALLELISMS, batch_kv_axes
from workloads.base import WorkloadError, check_choice
from workloads.mesh import AnyMesh, axis_size, check_spec, named


@dataclass(frozen=True)
class Split:
    """A layout on one mesh: the mesh axes that split the batch, the weights' D (``fsdp``) and
    the model's heads/F/V. Empty tuples mean "not split" (None in a PartitionSpec)."""

    batch: tuple[str, ...]
    fsdp: tuple[str, ...]
    model: tuple[str, ...]
    expert: tuple[str, ...] = ()   # the MoE experts' E (workloads.llama.moe)


def split_of(parallelism: str, mesh: AnyMesh | Mapping[str, int] | None) -> Split:
    """The registry's layout ``parallelism`` on ``mesh`` (a jax mesh, or axis name -> size in
    order); None: unsplit. WorkloadError when the mesh does not fit the layout."""
    if mesh is None:
        return Split((), (), ())
    shape = dict(mesh.shape) if hasattr(mesh, "shape") else dict(mesh)
    try:
        entry = layouts.layout(parallelism)
        by = layouts.split(entry, shape)
        experts = layouts.expert_axes(entry, shape)
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    return Split(by["batch"], by["weights"], by["model"], experts)


def _names_only(name: str) -> Callable[[tuple[str, ...]], Split]:
    return lambda axes: split_of(name, {a: 1 for a in axes})


class _Parallelisms(Mapping):
    """The registry's layouts as ``name -> (mesh axis names -> Split)``: a view of
    ``predictions.layouts.LAYOUTS`` (composed ``a+b`` names found too), not a second list."""

    def __contains__(self, name) -> bool:
        try:
            layouts.layout(name)
        except (ValueError, TypeError, AttributeError):
            return False
        return True

    def __getitem__(self, name: str) -> Callable[[tuple[str, ...]], Split]:
        if name not in self:
            raise KeyError(name)
        return _names_only(name)

    def __iter__(self):
        return iter(layouts.LAYOUTS)

    def __len__(self) -> int:
        return len(layouts.LAYOUTS)


PARALLELISMS: Mapping[str, Callable[[tuple[str, ...]], Split]] = _Parallelisms()


def _axes(t: tuple[str, ...]):
    """A PartitionSpec entry: None, one axis name, or a tuple of names."""
    return None if not t else (t[0] if len(t) == 1 else t)


class Sharder:
    """Specs for params, activations and the KV cache of one model on one mesh and parallelism.

    ``Sharder(None, ...)`` is the unsharded reference: every constraint is a no-op.
    """

    def __init__(self, mesh: AnyMesh | None, parallelism: str, dims):
        check_choice("parallelism", parallelism, PARALLELISMS)
        self.mesh = mesh
        self.dims = dims
        self.layout = split_of(parallelism, mesh)
        n_model = axis_size(mesh, self.layout.model) if mesh is not None else 1
        if dims.N % n_model:
            raise WorkloadError(f"{parallelism}: N={dims.N} query heads are not divisible by "
                                f"{n_model} model devices; the model axes must divide N")
        kv_split = dims.K % n_model == 0
        if not kv_split and n_model % dims.K:
            raise WorkloadError(f"{parallelism}: K={dims.K} KV heads and {n_model} model devices: "
                                f"one must divide the other to shard or replicate K/V")
        # Beyond K-way, replicate K/V and repeat each head (reference §7.4).
        self.kv_repeat = 1 if kv_split else n_model // dims.K
        self.kv_layout = WORKLOAD_PARALLELISMS.get(parallelism, ("", "heads"))[1]
        heads, z = self.layout.model if kv_split else (), ()
        z_dim = KV_Z_DIM.get(self.kv_layout, "")
        if z_dim and not kv_split:
            # heads K-way, the batch (KV[2, B_Z, S, K_Y, H]) or the sequence (KV[2, B, S_Z,
            # K_Y, H]) over the Z = Y/K model devices that share a head (§7.4)
            self.mesh, self.layout, heads, z = batch_kv_mesh(mesh, self.layout, dims.K,
                                                             parallelism)
            self.kv_repeat = 1
        # FSDP's axes lead the batch's: with the batch over (expert, fsdp) in that order beside
        # a model axis, XLA:CPU's SPMD partitioner (jax 0.10.2) computes x·W_O[N_Y, H, D_X]
        # wrong (an error of 36 on unit normals); over (fsdp, expert) it is right
        lead = tuple(a for a in self.layout.batch if a in self.layout.fsdp)
        batch = lead + tuple(a for a in self.layout.batch if a not in lead)
        b, f, m = (_axes(t) for t in (batch, self.layout.fsdp, self.layout.model))
        kv = _axes(heads)
        self.batch, self.fsdp, self.model, self.kv = b, f, m, kv
        # the KV cache's heads: past K-way the cache stores each head kv_repeat times, split
        # over the model axes, so each device keeps its own heads' K/V, 1/K of the cache (the
        # book's "replicated beyond K-way", §7.4), not the whole cache on every model device
        self.kv_cached = m if self.kv_repeat > 1 else kv
        self.expert = _axes(self.layout.expert)
        n_expert = axis_size(mesh, self.layout.expert) if mesh is not None else 1
        if getattr(dims, "E", 0) % n_expert:
            raise WorkloadError(f"{parallelism}: E={dims.E} experts are not divisible by "
                                f"{n_expert} expert devices; valid: E a multiple of "
                                f"{n_expert}, or fewer devices on the expert axes")
        # the KV cache's batch split: the batch's axes, then Z (the batch-sharded cache, whose
        # queries XLA moves to its split and back: an AllToAll over Z each way); its sequence
        # split: Z for the sequence-sharded cache (attention_seq combines the Z partials)
        self.kv_batch = kvb = _axes(batch + (z if z_dim == "B" else ()))
        self.kv_seq = kvs = _axes(z if z_dim == "S" else ())
        # Activation specs by book letters; the residual stream is [B, T, D_model] (§6.1 TP).
        self.act_specs: dict[str, P] = {
            "BT": P(b, None),
            "BTD": P(b, None, m),
            "BTF": P(b, None, m),
            "BTV": P(b, None, m),
            "BTNH": P(b, None, m, None),
            "BTKH": P(b, None, kv, None),
            "BSKH": P(kvb, kvs, self.kv_cached, None),
            "BSK": P(kvb, kvs, self.kv_cached),    # int8 KV-cache scales
            "DV": P(None, m),    # the unembedding gathered over FSDP (chunked loss)
        }

    # --- parameters -------------------------------------------------------------------------
    def param_spec(self, name: str) -> P:
        """Spec for a parameter by its key; stacked layer params get a leading unsplit L."""
        f, m, kv, e = self.fsdp, self.model, self.kv, self.expert
        both = _axes(self.layout.fsdp + self.layout.model)
        table: dict[str, P] = {
            "embed_VD": P(None, both),    # lookup output lands D-split, like the residual
            "unembed_DV": P(f, m),        # vocab-parallel logits, D FSDP-split
            "final_norm_D": P(None),
            "attn_norm_D": P(None),
            "mlp_norm_D": P(None),
            "w_q_DNH": P(f, m, None),     # heads over the model axes (Megatron)
            "w_k_DKH": P(f, kv, None),
            "w_v_DKH": P(f, kv, None),
            "w_o_NHD": P(m, None, f),
            "w_gate_DF": P(f, m),         # W_in[D_X, F_Y] (training.md, FSDP + TP)
            "w_up_DF": P(f, m),
            "w_down_FD": P(m, f),         # W_out[F_Y, D_X]
            # MoE (gpus.md, expert parallelism): W_in[E_Z, D_X, F_Y], W_out[E_Z, F_Y, D_X]
            "router_DE": P(f, None),
            "w_gate_EDF": P(e, f, m),
            "w_up_EDF": P(e, f, m),
            "w_down_EFD": P(e, m, f),
        }
        spec = tuple(table[name])
        return P(None, *spec) if name in LAYER_KEYS else P(*spec)

    def scale_spec(self, name: str) -> P:
        """An int8 weight's scale keeps the weight's output dims (``SCALE_DIMS``) and split."""
        spec = tuple(self.param_spec(name))
        lead = 1 if name in LAYER_KEYS else 0
        return P(*spec[:lead], *(spec[lead + i] for i in SCALE_DIMS[name]))

    def param_specs(self, params) -> dict:
        def spec_of(path, leaf):
            keys = [k.key for k in path if hasattr(k, "key")]
            name = keys[1] if keys[0] == "layers" else keys[0]
            return self.scale_spec(name) if keys[-1] == "scale" else self.param_spec(name)
        return jax.tree_util.tree_map_with_path(spec_of, params)

    def param_shardings(self, params):
        return jax.tree.map(lambda s: named(self.mesh, s), self.param_specs(params),
                            is_leaf=lambda x: isinstance(x, P))

    def check_params(self, params) -> None:
        """Every parameter dim divides by the axes that split it (``WorkloadError`` otherwise)."""
        specs = self.param_specs(params)
        for (path, leaf), spec in zip(jax.tree_util.tree_leaves_with_path(params),
                                      jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))):
            keys = [str(k.key) for k in path]
            name = keys[1] if keys[0] == "layers" else keys[0]
            dims = letters(name)
            if keys[-1] == "scale":
                dims = "".join(dims[i] for i in SCALE_DIMS[name])
            dims = ("L" if name in LAYER_KEYS else "") + dims
            check_spec(self.mesh, f"parameter {'/'.join(keys)}", leaf.shape, spec, dims)

    # --- activations --------------------------------------------------------------------------
    def spec(self, letters_: str) -> P:
        return self.act_specs[letters_]

    def sharding(self, letters_: str):
        return named(self.mesh, self.act_specs[letters_])

    def act(self, x, letters_: str):
        """Constrain activation ``x`` (named by its letters) to this layout; no-op unsharded."""
        if self.mesh is None:
            return x
        return jax.lax.with_sharding_constraint(x, named(self.mesh, self.act_specs[letters_]))

    def check_act(self, letters_: str, shape) -> None:
        if self.mesh is not None:
            check_spec(self.mesh, f"activation {letters_}", shape, self.act_specs[letters_],
                       letters_)


# the KV cache's dim over Z = Y/K (the model devices that share a KV head) by its KV layout
# (``serving_layouts.KV_LAYOUTS``): B for the batch-sharded cache, S for the sequence-sharded one
KV_Z_DIM: dict[str, str] = {"batch": "B", "sequence": "S"}


def batch_kv_mesh(mesh: AnyMesh, layout: Split, K: int, parallelism: str = "dp_tp_kv_batch"):
    """The mesh with its model axes cut into K for the KV heads and Z = Y/K for the batch (or
    the sequence) of the cache (``serving_layouts.batch_kv_axes``; reference §7.4). Returns
    (mesh, the layout on it, the heads' axes, the Z axes)."""
    try:
        shape, heads, z = batch_kv_axes(dict(mesh.shape), layout.model, K)
    except ValueError as e:
        raise WorkloadError(f"{parallelism}: {e}") from None
    names, dims, types = tuple(shape), tuple(shape.values()), (mesh.axis_types[0],) * len(shape)
    if isinstance(mesh, jax.sharding.Mesh):
        new = jax.sharding.Mesh(mesh.devices.reshape(dims), names, axis_types=types)
    else:
        new = jax.sharding.AbstractMesh(dims, names, axis_types=types)
    return new, replace(layout, model=heads + z), heads, z


DENSE_LAYER_KEYS = ("attn_norm_D", "mlp_norm_D", "w_q_DNH", "w_k_DKH", "w_v_DKH", "w_o_NHD",
                    "w_gate_DF", "w_up_DF", "w_down_FD")
# a MoE layer's router and routed experts (workloads.llama.moe)
EXPERT_KEYS = ("router_DE", "w_gate_EDF", "w_up_EDF", "w_down_EFD")
# every key a layer may hold
LAYER_KEYS = DENSE_LAYER_KEYS + EXPERT_KEYS


def layer_keys(d) -> tuple[str, ...]:
    """The keys of one layer: dense, or MoE (its experts, and the dense MLP's keys as the
    shared expert with ``shared_experts=1``)."""
    if not getattr(d, "E", 0):
        return DENSE_LAYER_KEYS
    mlp = DENSE_LAYER_KEYS[6:] if d.shared_experts else ()
    return DENSE_LAYER_KEYS[:6] + EXPERT_KEYS + mlp


# Output dims (of the unstacked weight) that an int8 per-channel scale keeps.
SCALE_DIMS: dict[str, tuple[int, ...]] = {
    "embed_VD": (0,), "unembed_DV": (1,), "w_q_DNH": (1, 2), "w_k_DKH": (1, 2),
    "w_v_DKH": (1, 2), "w_o_NHD": (2,), "w_gate_DF": (1,), "w_up_DF": (1,), "w_down_FD": (1,),
    "router_DE": (1,), "w_gate_EDF": (0, 2), "w_up_EDF": (0, 2), "w_down_EFD": (0, 2),
}


def letters(name: str) -> str:
    """``"w_q_DNH"`` -> ``"DNH"``: the book letters a key ends with."""
    return name.rsplit("_", 1)[1]
