"""The KV cache of ``llama_prefill``, ``llama_decode`` and ``llama_generate`` (`inference.md`,
reference §7.4): ``{"k_LBKSH", "v_LBKSH"}`` stacked over the layers, [L, B, K', S, H] (K before
S: one layer's [B, K, S, H] has the batch dims of both attention matmuls major, so they read it
as it lies), int8 with per-(token, head) scales ``k_scale_LBKS``/``v_scale_LBKS`` under
``int8_kv``; its specs by the ``Sharder``'s KV layout, the new tokens written in place and a
layer read back.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.base import WorkloadError
from workloads.llama.sharding import Sharder

# Where the decode step's cache lies in memory (its in and out layouts; ``--set cache_layout=``).
# XLA:TPU's attention puts the batch in the sublanes at B = 8 a chip, so a cache left row-major
# is copied whole into that layout at every step's entry and back at its exit (LLaMA-3 8B on v5e
# 4x2: four copies of 2.15 GB, 21 ms of a 48.6 ms simulated step); left to the compiler
# (``Layout.AUTO``, as MaxText's MaxEngine compiles its decode state) it is kept in the layout
# the step reads (none of those copies, 27.7 ms).
# llama_decode's step only: prefill and the generation loop's programs keep the cache row-major
# (one layout that all three must share; ``only_decode``).
CACHE_LAYOUTS = {
    "auto": "the compiler's on TPU, row-major elsewhere",
    "compiler": "the layout the compiler picks for the step (Layout.AUTO), on any backend",
    "default": "row-major, as jax places an array",
}


def cache_shapes(cfg, repeat: int = 1) -> dict:
    """The stacked cache [L, B, K', S, H] (and its int8 scales): K' = K · ``repeat``, the heads
    stored once per model device that shares them (``Sharder.kv_repeat``, §7.4)."""
    dtype = jnp.int8 if cfg.int8_kv else jnp.dtype(cfg.dtype)
    kv = (cfg.L, cfg.B, cfg.K * repeat, cfg.S, cfg.H)
    out = {"k_LBKSH": jax.ShapeDtypeStruct(kv, dtype), "v_LBKSH": jax.ShapeDtypeStruct(kv, dtype)}
    if cfg.int8_kv:
        scale = jax.ShapeDtypeStruct(kv[:-1], jnp.dtype(cfg.dtype))
        out.update(k_scale_LBKS=scale, v_scale_LBKS=scale)
    return out


def cache_specs(cfg, sh: Sharder) -> dict:
    lbksh = (None, sh.kv_batch, sh.kv_cached, sh.kv_seq, None)   # S over Z: dp_tp_kv_seq
    return {k: P(*lbksh[:len(v.shape)]) for k, v in cache_shapes(cfg).items()}


def stored(x_BTKH, sh: Sharder):
    """K or V with its K heads on axis 2 (new tokens' [B, T, K, H], a request's cache
    [L, 1, K, S, H]) as the cache stores them: each head ``kv_repeat`` times where K/V are
    replicated past K-way (``cache_shapes``), else as they are."""
    return x_BTKH if sh.kv_repeat == 1 else jnp.repeat(x_BTKH, sh.kv_repeat, axis=2)


def quantize(x_BTKH):
    scale = jnp.maximum(jnp.max(jnp.abs(x_BTKH.astype(jnp.float32)), axis=-1), 1e-12) / 127.0
    q8 = jnp.clip(jnp.round(x_BTKH.astype(jnp.float32) / scale[..., None]), -127, 127)
    return q8.astype(jnp.int8), scale.astype(x_BTKH.dtype)


def write(c: dict, layer, k_BTKH, v_BTKH, pos) -> dict:
    """Write the new tokens' K/V into the stacked cache at (``layer``, slot ``pos``): a
    dynamic-update-slice of the whole [L, B, S, K, H] buffer that touches only the update, so
    the scan carry (and the donated argument) is updated in place."""
    def at(buf, new_BTK):   # [B, T, K, ...] -> [1, B, K, T, ...] at (layer, 0, 0, pos, 0)
        new = jnp.swapaxes(new_BTK, 1, 2)[None].astype(buf.dtype)
        return jax.lax.dynamic_update_slice(buf, new, (layer, 0, 0, pos) + (0,) * (buf.ndim - 4))

    out = {}
    for name, x in (("k", k_BTKH), ("v", v_BTKH)):
        if f"{name}_scale_LBKS" in c:
            q8, scale = quantize(x)
            out[f"{name}_LBKSH"] = at(c[f"{name}_LBKSH"], q8)
            out[f"{name}_scale_LBKS"] = at(c[f"{name}_scale_LBKS"], scale)
        else:
            out[f"{name}_LBKSH"] = at(c[f"{name}_LBKSH"], x)
    return out


def read(c: dict, layer, name: str, dtype):
    """One layer's K or V from the stacked cache, dequantised to ``dtype``, as [B, S, K, H]
    (a logical transpose of the stored [B, K, S, H] that XLA folds into the attention dots)."""
    x = jax.lax.dynamic_index_in_dim(c[f"{name}_LBKSH"], layer, keepdims=False).astype(dtype)
    if f"{name}_scale_LBKS" in c:
        scale = jax.lax.dynamic_index_in_dim(c[f"{name}_scale_LBKS"], layer, keepdims=False)
        x = x * scale[..., None].astype(dtype)
    return jnp.swapaxes(x, 1, 2)


def compiler_lays_out(cache_layout: str, mesh) -> bool:
    """Whether the step's cache takes the compiler's layout (``CACHE_LAYOUTS``); never on an
    ``AbstractMesh``, which has no devices to compile for (it is lowered only)."""
    if not isinstance(mesh, jax.sharding.Mesh):
        return False
    if cache_layout == "auto":
        return mesh.devices.flat[0].platform == "tpu"
    return cache_layout == "compiler"


def compiler_formats(jitted, abstract_args: tuple, shardings: dict) -> dict:
    """The cache's formats (layout and sharding) the compiler picks for the step ``jitted(c_in)``
    (a jit whose cache in and out are ``c_in``) when left free: compiled once on
    ``abstract_args`` with ``Layout.AUTO``, read back from the compiled step's inputs. A jit with
    ``Layout.AUTO`` cannot take placed arrays, so the step is jitted again with these."""
    from jax.experimental.layout import Format, Layout

    auto = {n: Format(Layout.AUTO, s) for n, s in shardings.items()}
    return dict(jitted(auto).lower(*abstract_args).compile().input_formats[0][1])


def only_decode(cfg, workload: str) -> None:
    """``cache_layout`` is the decode step's: a layout asked of another workload is refused."""
    if cfg.cache_layout != "auto":
        raise WorkloadError(f"cache_layout={cfg.cache_layout} is llama_decode's (its step's cache "
                            f"in and out); {workload} keeps its cache row-major: leave it unset")
