"""``llama_prefill`` and ``llama_decode``: LLaMA-3 inference with a KV cache (`inference.md`).

- prefill: ``fn(params, tokens_BT) -> (logits_BV, cache)`` runs the whole prompt, writes K/V for
  positions [0, T) into a fresh cache of S slots and keeps the last token's logits (§7.1).
- decode: ``fn(params, cache, tokens_B1, pos) -> (logits_BV, cache)`` appends one token per
  sequence at slot ``pos`` (the same for every sequence) and attends over slots [0, pos].
- a MoE model (E > 0) returns its routing as a third output (``workloads.llama.moe_step``).

The cache is ``workloads.llama.kv_cache``'s, sharded [B_batch, K_model, S, H] (reference §7.4),
int8 with per-(token, head) scales under ``int8_kv`` (in [B, S, K, H] every layer's K and V
would be transposed, one more pass over the cache each step).
``int8_weights`` stores every matrix as int8 with a per-output-channel scale and dequantises in
the matmul. Default parallelism ``dp_tp``: batch over X, heads/F over Y — model parallelism for
decode, since FSDP would move the weights every step (reference §7.4). Decode donates the cache
(``donate_argnums=1``): the output cache aliases the input and each layer's write is an in-place
dynamic-update-slice, so a step needs one cache, not two; ``carry_cache`` feeds the returned
cache into the next step.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from workloads.base import Workload, WorkloadError, check_choice, smaller
from workloads.llama import attention_seq, book, kv_cache, memory, model, moe_presets, moe_step
from workloads.llama.config import MODEL_DIMS, Dims, dims_of, fix_dtypes
from workloads.llama.sharding import PARALLELISMS, Sharder
from workloads.mesh import AnyMesh, build_args, named


@dataclass(frozen=True)
class ServeConfig(Dims):
    """Model dims plus B sequences, T prompt tokens (prefill), S cache slots, ``pos`` (decode slot,
    -1 = S - 1: attend over the full context), dtypes and parallelism."""

    B: int = 8
    T: int = 16
    S: int = 32
    pos: int = -1
    dtype: str = "bfloat16"
    int8_weights: bool = False
    int8_kv: bool = False
    parallelism: str = "dp_tp"
    scan_layers: bool = True
    seed: int = 0
    cache_layout: str = "auto"   # the decode step's (kv_cache.CACHE_LAYOUTS)

    def __post_init__(self):
        self.check_dims()
        fix_dtypes(self, "dtype")
        check_choice("parallelism", self.parallelism, PARALLELISMS)
        check_choice("cache_layout", self.cache_layout, kv_cache.CACHE_LAYOUTS)
        if self.T > self.S:
            raise WorkloadError(f"prompt T={self.T} does not fit the cache of S={self.S} slots")
        if not -1 <= self.pos < self.S:
            raise WorkloadError(f"pos={self.pos} must be a cache slot in [0, {self.S}) or -1")

    @property
    def decode_pos(self) -> int:
        return self.S - 1 if self.pos < 0 else self.pos


def _preset(name: str, **run) -> ServeConfig:
    return ServeConfig(**{**vars(MODEL_DIMS[name]), **run})


PRESETS: dict[str, ServeConfig] = {
    "tiny": _preset("tiny"),
    "100m": _preset("100m", B=16, T=512, S=1024),
    "1b": _preset("1b", B=32, T=2048, S=8192),
    # reference §10 AI-3: LLaMA-3 70B decode at batch 32 with 8192-token contexts
    "8b": _preset("8b", B=32, T=2048, S=8192),
    "70b": _preset("70b", B=32, T=2048, S=8192),
    "405b": _preset("405b", B=32, T=2048, S=8192),
    **moe_presets.serve(lambda dims, **run: ServeConfig(**{**vars(dims), **run})),   # MoE
}


def extend(params, cache, tokens_BT, pos, cfg: ServeConfig, sh: Sharder):
    """``routed_extend`` without the routing."""
    return routed_extend(params, cache, tokens_BT, pos, cfg, sh)[:2]


def routed_extend(params, cache, tokens_BT, pos, cfg: ServeConfig, sh: Sharder):
    """Run T new tokens at slots [pos, pos + T): returns (logits [B, T or 1, V], updated cache,
    the step's routing output: ``moe_step.stacked``, () for a dense model).

    The stacked cache rides in the layer loop's carry and layer l writes its slice in place
    (a scan's per-layer outputs would be a second cache-sized buffer). With ``pos`` the Python
    int 0 (prefill) the tokens attend causally over their own K/V, not over all S slots
    (MaxText's prefill) and only the last token's logits are computed; otherwise the tokens
    attend over the cache slots up to their position.
    """
    d = dims_of(cfg)
    dtype = jnp.dtype(cfg.dtype)
    B, T = tokens_BT.shape
    cached = not (isinstance(pos, int) and pos == 0)
    x = sh.act(model.embed(params["embed_VD"], tokens_BT).astype(dtype), "BTD")
    pos_BT = pos + jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    c_specs = kv_cache.cache_specs(cfg, sh)

    def body(carry, w_and_layer):
        x, c = carry
        w, layer = w_and_layer

        def kv_fn(k, v):
            if sh.kv_seq is None:
                c_new = kv_cache.write(c, layer, kv_cache.stored(k, sh), kv_cache.stored(v, sh),
                                       pos)
            else:   # S over Z: written on its owner
                c_new = attention_seq.write(c, layer, k, v, pos, sh, kv_cache.quantize)
            if sh.mesh is not None:
                c_new = {n: jax.lax.with_sharding_constraint(a, named(sh.mesh, c_specs[n]))
                         for n, a in c_new.items()}
            if not cached:
                return k, v, False, c_new
            read = (kv_cache.read(c_new, layer, n, dtype) for n in ("k", "v"))
            return (*read, True, c_new)

        x, c, routing = model.routed_block(x, w, pos_BT, d, sh, kv_fn)
        return (x, c), routing

    layers = (params["layers"], jnp.arange(cfg.L, dtype=jnp.int32))
    (x, cache), routing = model.run_layers(body, (x, cache), layers, cfg.scan_layers)
    if not cached:   # prefill: only the last token's logits are used (skips 2·D·V·(T-1)·B FLOPs)
        x = x[:, -1:]
    return model.logits(params, x, d, sh), cache, moe_step.stacked(routing)


# --- building ---------------------------------------------------------------------------------

def _setup(cfg: ServeConfig, mesh: AnyMesh | None):
    d = dims_of(cfg)
    sh = Sharder(mesh, cfg.parallelism, d)
    p_abs = model.abstract_params(d, cfg.dtype)
    if cfg.int8_weights:
        p_abs = model.abstract_quantized(p_abs)
    if mesh is not None:
        sh.check_params(p_abs)
        sh.check_act("BSKH", (cfg.B, cfg.S, cfg.K * sh.kv_repeat, cfg.H))
        sh.check_act("BTD", (cfg.B, 1, cfg.D))
    return d, sh, p_abs


def _shard(mesh, tree):
    return None if mesh is None else jax.tree.map(lambda s: named(mesh, s), tree,
                                                  is_leaf=lambda x: isinstance(x, P))


def host_params(cfg: ServeConfig):
    params = model.init_params(dims_of(cfg), cfg.seed, cfg.dtype)
    return jax.device_get(jax.jit(model.quantize)(params)) if cfg.int8_weights else params


def tokens(cfg: ServeConfig, T: int) -> np.ndarray:
    return np.random.default_rng(cfg.seed + 1).integers(0, cfg.V, size=(cfg.B, T), dtype=np.int32)


def build_prefill(cfg: ServeConfig, mesh: AnyMesh | None, abstract: bool = False):
    """``(prefill, (params, tokens_BT))``."""
    kv_cache.only_decode(cfg, "llama_prefill")
    d, sh, p_abs = _setup(cfg, mesh)
    mesh = sh.mesh   # the batch-sharded cache's mesh splits the model axes (sharding.py)
    c_specs = kv_cache.cache_specs(cfg, sh)

    def prefill(params, tokens_BT):
        cache = {n: jnp.zeros(s.shape, s.dtype)
                 for n, s in kv_cache.cache_shapes(cfg, sh.kv_repeat).items()}
        if mesh is not None:
            cache = {n: jax.lax.with_sharding_constraint(a, named(mesh, c_specs[n]))
                     for n, a in cache.items()}
        logits_BTV, cache, routing = routed_extend(params, cache, tokens_BT, 0, cfg, sh)
        return (logits_BTV[:, -1], cache) + routing

    tok_abs = jax.ShapeDtypeStruct((cfg.B, cfg.T), jnp.int32)
    if mesh is None:
        fn, shardings = jax.jit(prefill), None
    else:
        shardings = (sh.param_shardings(p_abs), sh.sharding("BT"))
        out = (named(mesh, P(sh.batch, sh.model)), _shard(mesh, c_specs))
        out += moe_step.out_shardings(cfg, mesh)
        fn = jax.jit(prefill, in_shardings=shardings, out_shardings=out)
    args = build_args(abstract, (p_abs, tok_abs), shardings,
                      lambda: (host_params(cfg), tokens(cfg, cfg.T)))
    return fn, tuple(args)


def build_decode(cfg: ServeConfig, mesh: AnyMesh | None, abstract: bool = False):
    """``(decode, (params, cache, tokens_B1, pos))`` with a zero cache and ``pos = decode_pos``."""
    d, sh, p_abs = _setup(cfg, mesh)
    mesh = sh.mesh
    c_specs = kv_cache.cache_specs(cfg, sh)

    def decode(params, cache, tokens_B1, pos):
        logits_BTV, cache, routing = routed_extend(params, cache, tokens_B1, pos, cfg, sh)
        return (logits_BTV[:, -1], cache) + routing

    abs_tree = (p_abs, kv_cache.cache_shapes(cfg, sh.kv_repeat),
                jax.ShapeDtypeStruct((cfg.B, 1), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))
    if mesh is None:
        fn, shardings = jax.jit(decode, donate_argnums=1), None
    else:
        c_sh = _shard(mesh, c_specs)
        shardings = (sh.param_shardings(p_abs), c_sh, sh.sharding("BT"), named(mesh, P()))

        def jitted(c_in):   # the cache in and out as c_in (its shardings or formats)
            return jax.jit(decode, in_shardings=(shardings[0], c_in, *shardings[2:]),
                           donate_argnums=1,
                           out_shardings=(named(mesh, P(sh.batch, sh.model)), c_in)
                           + moe_step.out_shardings(cfg, mesh))
        c_in = c_sh
        if kv_cache.compiler_lays_out(cfg.cache_layout, mesh):
            c_in = kv_cache.compiler_formats(jitted, build_args(True, abs_tree, shardings, None),
                                             c_sh)
        fn = jitted(c_in)

    def host():
        cache = {n: np.zeros(s.shape, s.dtype)
                 for n, s in kv_cache.cache_shapes(cfg, sh.kv_repeat).items()}
        return host_params(cfg), cache, tokens(cfg, 1), np.int32(cfg.decode_pos)

    args = tuple(build_args(abstract, abs_tree, shardings, host))
    if mesh is not None and c_in is not c_sh:   # placed (or described) in the step's formats
        params, cache, tok, pos = args
        cache = {n: (jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=c_in[n]) if abstract
                     else jax.device_put(a, c_in[n])) for n, a in cache.items()}
        args = (params, cache, tok, pos)
    return fn, args


def carry_cache(args: tuple, out: tuple) -> tuple:
    """Decode's next arguments: the same params, tokens and slot, the cache just returned (the
    one passed in was donated)."""
    params, _, tokens_B1, pos = args
    return params, out[1], tokens_B1, pos


PREFILL = Workload(
    name="llama_prefill",
    Config=ServeConfig,
    build=build_prefill,
    presets=PRESETS,
    description="LLaMA-3 prefill: B prompts of T tokens into a fresh KV cache of S slots",
    memory=memory.prefill_bytes,
    book=book.prefill,
    memory_knobs=smaller("B", "S", "T"),
)

DECODE = Workload(
    name="llama_decode",
    Config=ServeConfig,
    build=build_decode,
    presets=PRESETS,
    description="LLaMA-3 decode: one token for each of B sequences against a KV cache of S slots",
    carry=carry_cache,
    memory=memory.serve_bytes,
    book=book.decode,
    memory_knobs=smaller("B", "S", "T"),
)
