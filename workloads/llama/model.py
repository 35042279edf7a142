"""LLaMA-3: pre-norm blocks of RMSNorm, RoPE, grouped-query attention and a SwiGLU MLP, with
untied input embedding and output projection and no biases (`transformers.md`, reference §5);
the attention, fused or by hand, is ``workloads.llama.attention``'s.

Parameters are a dict; the L layers are stacked along a leading axis (``params["layers"]``) so a
``lax.scan`` over them compiles one layer body whatever L is:

    embed_VD, final_norm_D, unembed_DV,
    layers/{attn_norm_D, w_q_DNH, w_k_DKH, w_v_DKH, w_o_NHD,
            mlp_norm_D, w_gate_DF, w_up_DF, w_down_FD}

That is L(3DF + 2D(N+K)H + 2D) + D + 2DV parameters (reference §5.1 plus two norm vectors per
layer and the final norm). A MoE layer (E > 0, ``workloads.llama.moe``) holds router_DE,
w_gate_EDF, w_up_EDF, w_down_EFD in place of the MLP's three (kept as the shared expert with
``shared_experts=1``): E·3DF + DE routed parameters (reference §5.4). int8 weights are
``{"q8": int8[...], "scale": [output dims]}``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from workloads.llama import moe, splash
from workloads.llama import remat as remat_policies
from workloads.llama.attention import attention
from workloads.llama.config import Dims
from workloads.llama.remat import name
from workloads.llama.sharding import LAYER_KEYS, SCALE_DIMS, Sharder, layer_keys, letters

NORM_KEYS = ("attn_norm_D", "mlp_norm_D", "final_norm_D")


def param_shapes(d: Dims) -> dict:
    """Shapes by key, layer params with their leading L."""
    sizes = {"L": d.L, "D": d.D, "F": d.F, "N": d.N, "K": d.K, "H": d.H, "V": d.V, "E": d.E}
    shape = lambda name: tuple(sizes[c] for c in letters(name))  # noqa: E731
    return {
        "embed_VD": shape("embed_VD"),
        "layers": {k: (d.L,) + shape(k) for k in layer_keys(d)},
        "final_norm_D": shape("final_norm_D"),
        "unembed_DV": shape("unembed_DV"),
    }


def _fan_in(name: str, shape: tuple[int, ...]) -> int:
    """Contracted size of a weight: everything but its output dims."""
    kept = math.prod(shape[-len(letters(name)):][i] for i in SCALE_DIMS[name])
    return math.prod(shape[-len(letters(name)):]) // kept


def init_params(d: Dims, key: int | np.random.Generator | jax.Array = 0,
                dtype=jnp.bfloat16) -> dict:
    """Host (NumPy) arrays: norm weights 1, matrices N(0, 1/fan_in), embedding N(0, 1).

    ``key`` is a NumPy seed or Generator (a jax key is turned into a seed): jax's threefry takes
    seconds to compile for a dozen shapes, NumPy takes microseconds.
    ``jax.device_put(params, shardings)`` places them.
    """
    if isinstance(key, jax.Array):   # a jax PRNG key: draw a NumPy seed from it
        key = int(jax.random.randint(key, (), 0, 2**31 - 1))
    rng = np.random.default_rng(key)
    np_dtype = jnp.dtype(dtype)

    def leaf(path, shape):
        name = path[-1].key
        if name in NORM_KEYS:
            return np.ones(shape, np_dtype)
        std = 1.0 if name == "embed_VD" else _fan_in(name, shape) ** -0.5
        return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np_dtype)

    return jax.tree_util.tree_map_with_path(leaf, param_shapes(d),
                                            is_leaf=lambda s: isinstance(s, tuple))


def abstract_params(d: Dims, dtype=jnp.bfloat16) -> dict:
    """``jax.ShapeDtypeStruct`` leaves of ``init_params``' tree, without allocating."""
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.dtype(dtype)), param_shapes(d),
                        is_leaf=lambda s: isinstance(s, tuple))


def count_params(tree) -> int:
    """Elements over all leaves (arrays or ShapeDtypeStructs); int8 trees include their scales."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(tree))


def quantize(params: dict) -> dict:
    """Symmetric per-output-channel int8: ``q8 = round(w / scale)``, ``scale = max|w| / 127``.
    A MoE router stays in its dtype (D·E per layer: its logits choose the experts)."""
    def q(path, w):
        name = path[-1].key
        if name in NORM_KEYS or name == "router_DE":
            return w
        lead = 1 if name in LAYER_KEYS else 0
        kept = {lead + i for i in SCALE_DIMS[name]} | set(range(lead))
        reduce = tuple(i for i in range(w.ndim) if i not in kept)
        w32 = w.astype(jnp.float32)
        scale = jnp.maximum(jnp.max(jnp.abs(w32), axis=reduce, keepdims=True), 1e-12) / 127.0
        q8 = jnp.clip(jnp.round(w32 / scale), -127, 127).astype(jnp.int8)
        return {"q8": q8, "scale": jnp.squeeze(scale, reduce).astype(w.dtype)}
    return jax.tree_util.tree_map_with_path(q, params)


def abstract_quantized(params: dict) -> dict:
    return jax.eval_shape(quantize, params)


# --- building blocks --------------------------------------------------------------------------

def project(eq: str, x, w):
    """``einsum(eq, x, w)`` for a float or int8 weight (dequantised by its per-channel scale)."""
    if isinstance(w, dict):
        y = jnp.einsum(eq, x, w["q8"].astype(x.dtype))
        return y * w["scale"].astype(x.dtype)
    return jnp.einsum(eq, x, w)


def embed(table, tokens_BT):
    if isinstance(table, dict):
        rows = jnp.take(table["q8"], tokens_BT, axis=0)
        return rows.astype(table["scale"].dtype) * jnp.take(table["scale"], tokens_BT)[..., None]
    return jnp.take(table, tokens_BT, axis=0)


def rms_norm(x_BTD, w_D, eps: float):
    x = x_BTD.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return (y * w_D.astype(jnp.float32)).astype(x_BTD.dtype)


def rope(x_BTnH, pos_BT, theta: float):
    """Rotary embedding, LLaMA's half-split layout: pair (i, i + H/2) turns by pos·θ^(-2i/H)."""
    half = x_BTnH.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = pos_BT.astype(jnp.float32)[..., None, None] * inv_freq   # [B, T, 1, H/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x = x_BTnH.astype(jnp.float32)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x_BTnH.dtype)


def mlp(h_BTD, w, sh: Sharder):
    """SwiGLU: W_out(silu(h W_gate) * h W_up) (`transformers.md`: gated MLP, 3DF params)."""
    g_BTF = name(sh.act(project("btd,df->btf", h_BTD, w["w_gate_DF"]), "BTF"), "mlpwi_0")
    u_BTF = name(sh.act(project("btd,df->btf", h_BTD, w["w_up_DF"]), "BTF"), "mlpwi_1")
    return name(project("btf,fd->btd", jax.nn.silu(g_BTF) * u_BTF, w["w_down_FD"]), "mlpwo")


def qkv(h_BTD, w, pos_BT, d: Dims, sh: Sharder):
    q = sh.act(project("btd,dnh->btnh", h_BTD, w["w_q_DNH"]), "BTNH")
    k = sh.act(project("btd,dkh->btkh", h_BTD, w["w_k_DKH"]), "BTKH")
    v = sh.act(project("btd,dkh->btkh", h_BTD, w["w_v_DKH"]), "BTKH")
    # named after RoPE, as MaxText names them (workloads.llama.remat)
    return (name(rope(q, pos_BT, d.rope_theta), "query_proj"),
            name(rope(k, pos_BT, d.rope_theta), "key_proj"), name(v, "value_proj"))


def block(x_BTD, w, pos_BT, d: Dims, sh: Sharder, kv_fn=None):
    """One pre-norm layer: x + attn(norm(x)), then + mlp(norm(x)).

    ``kv_fn(k, v) -> (k_all, v_all, cached, extra)`` lets prefill/decode write a KV cache;
    ``cached`` says whether to attend over the cache slots by position (decode) or causally over
    the layer's own T keys (training, and prefill from slot 0, as MaxText does).
    """
    return routed_block(x_BTD, w, pos_BT, d, sh, kv_fn)[:2]


def routed_block(x_BTD, w, pos_BT, d: Dims, sh: Sharder, kv_fn=None):
    """``block``, and its MLP's routing (``moe.ROUTING``; None for a dense MLP): the MLP is
    the routed one of ``workloads.llama.moe`` where E > 0."""
    h = rms_norm(x_BTD, w["attn_norm_D"], d.norm_eps)
    q, k, v = qkv(h, w, pos_BT, d, sh)
    k_all, v_all, cached, extra = (k, v, False, None) if kv_fn is None else kv_fn(k, v)
    o = attention(q, k_all, v_all, pos_BT if cached else None, sh, d.attention,
                  splash.Blocks(d.splash_block, d.splash_fused_bwd))
    o = sh.act(o, "BTNH")
    x_BTD = sh.act(x_BTD + name(project("btnh,nhd->btd", o, w["w_o_NHD"]), "out_proj"), "BTD")
    h = rms_norm(x_BTD, w["mlp_norm_D"], d.norm_eps)
    y, routing = moe.moe_mlp(h, w, d, sh) if d.E else (mlp(h, w, sh), None)
    return sh.act(x_BTD + y, "BTD"), extra, routing


def logits(params, x_BTD, d: Dims, sh: Sharder):
    h = rms_norm(x_BTD, params["final_norm_D"], d.norm_eps)
    return sh.act(project("btd,dv->btv", h, params["unembed_DV"]), "BTV")


def layer_at(layers: dict, i: int) -> dict:
    return jax.tree.map(lambda a: a[i], layers)


def run_layers(body, x, xs, scan: bool, remat: remat_policies.Remat = remat_policies.NONE):
    """``body(x, xs_l) -> (x, ys_l)`` over the stacked layers: ``lax.scan`` or an unrolled loop,
    the body checkpointed by the ``remat`` policy (`transformers.md`, reference §5.2), its
    input named ``decoder_layer_input`` (``workloads.llama.remat``)."""
    if remat.checkpoint:
        layer = body

        def named(x, xs_l):
            return layer(name(x, remat_policies.LAYER_INPUT), xs_l)

        body = jax.checkpoint(named, policy=remat.jax_policy())
    if scan:
        return jax.lax.scan(body, x, xs)
    n = jax.tree.leaves(xs)[0].shape[0]
    ys = []
    for i in range(n):
        x, y = body(x, layer_at(xs, i))
        ys.append(y)
    stacked = None if ys[0] is None else jax.tree.map(lambda *a: jnp.stack(a), *ys)
    return x, stacked


def forward(params, tokens_BT, d: Dims, sh: Sharder, dtype, scan: bool = True,
            remat: remat_policies.Remat = remat_policies.NONE):
    """Logits [B, T, V] in ``dtype`` for a full causal pass over ``tokens_BT`` (training)."""
    return logits(params, decoder(params, tokens_BT, d, sh, dtype, scan, remat), d, sh)


def decoder(params, tokens_BT, d: Dims, sh: Sharder, dtype, scan: bool = True,
            remat: remat_policies.Remat = remat_policies.NONE):
    """The residual stream [B, T, D] after the last layer, before the final norm and the
    unembedding (``logits``): what a chunked loss (``workloads.llama.loss``) projects."""
    return routed_decoder(params, tokens_BT, d, sh, dtype, scan, remat)[0]


def routed_decoder(params, tokens_BT, d: Dims, sh: Sharder, dtype, scan: bool = True,
                   remat: remat_policies.Remat = remat_policies.NONE):
    """``decoder``, and each layer's routing stacked over the L layers (``moe.ROUTING``, a
    leading L; None for a dense model)."""
    B, T = tokens_BT.shape
    x = sh.act(embed(params["embed_VD"], tokens_BT).astype(dtype), "BTD")
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))

    def body(x, w):
        x, _, routing = routed_block(x, w, pos_BT, d, sh)
        return x, routing

    return run_layers(body, x, params["layers"], scan, remat)
