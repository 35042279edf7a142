"""``llama_generate``: LLaMA-3 served as a server serves it (`inference.md` §7.3, continuous
batching; JetStream's split into programs driven from Python).

Three programs, each compiled once:

- ``prefill(params, cache1, tokens_1T, start, length) -> (first token, cache1)``: one request's
  prompt (padded to the bucket T) written into a one-sequence cache from slot ``start``; with a
  cached shared prefix in ``cache1`` (``start`` = its length) only the rest of the prompt runs
  (prefix caching); the greedy first token comes back.
- ``insert(cache_B, cache1, slot) -> cache_B``: the request's cache into one of B slots.
- ``generate(params, cache_B, tokens_B, pos_B) -> (next tokens_B, cache_B)``: one token for every
  slot, each at its own position (``pos_B``), greedy.

``generate_loop`` drives them over a seeded stream of requests (slots refilled as requests end)
and measures time to first token, time per output token, tokens/s and the slots' occupancy.
``harness run`` captures that loop whole (the record's ``loop``, ``StreamLoop``: every program's
executions and the host's time between them, generate the step program) and the report shows
its figures from the same stream; ``build`` gives the generate program at B slots alone (ahead
of time, ``harness predict-hlo``; the memory estimate).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from workloads.base import Workload, WorkloadError, smaller
from workloads.llama import book, generate_loop, kv_cache, memory, model, serve
from workloads.llama.config import MODEL_DIMS, dims_of
from workloads.llama.serve import ServeConfig
from workloads.llama.sharding import Sharder
from workloads.mesh import AnyMesh, build_args, named


@dataclass(frozen=True)
class GenerateConfig(ServeConfig):
    """``ServeConfig`` read as a server: B slots, prompts padded to the bucket T, S cache slots a
    sequence; R requests whose prompts have [p_min, p_max] tokens after a shared prefix of
    ``prefix`` tokens (a ``shared`` fraction of them start with it), generating [g_min, g_max]
    tokens, arriving as a Poisson process of ``rate`` requests/s (0: all at once); ``seed``
    draws them."""

    R: int = 8
    p_min: int = 2
    p_max: int = 8
    g_min: int = 2
    g_max: int = 6
    prefix: int = 4
    shared: float = 0.5
    rate: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        c = self
        checks = (
            (f"R={c.R}", c.R >= 1, "at least 1 request"),
            (f"p_min={c.p_min}, p_max={c.p_max}", 1 <= c.p_min <= c.p_max <= c.T,
             f"1 <= p_min <= p_max <= T={c.T} (the prefill bucket)"),
            (f"g_min={c.g_min}, g_max={c.g_max}", 1 <= c.g_min <= c.g_max, "1 <= g_min <= g_max"),
            (f"prefix={c.prefix}", c.prefix >= 0 and c.prefix + max(c.T, c.p_max + c.g_max) <= c.S,
             f"prefix + max(T, p_max + g_max) <= S={c.S} (every sequence and its padded prompt "
             f"fit a slot)"),
            (f"shared={c.shared}", 0.0 <= c.shared <= 1.0, "a fraction in [0, 1]"),
            (f"rate={c.rate}", c.rate >= 0.0, "requests per second >= 0 (0: all arrive at once)"),
        )
        for what, ok, valid in checks:
            if not ok:
                raise WorkloadError(f"llama_generate {what} does not fit; valid: {valid}")


def _preset(name: str, **run) -> GenerateConfig:
    return GenerateConfig(**{**vars(MODEL_DIMS[name]), **run})


PRESETS: dict[str, GenerateConfig] = {
    "tiny": _preset("tiny", B=4, T=8, S=32),
    # a GPU-sized stream: 64 requests over 16 slots of a 100M model
    "100m": _preset("100m", B=16, T=256, S=1024, R=64, p_min=64, p_max=256, g_min=32,
                    g_max=256, prefix=128, shared=0.5),
}


@dataclass
class Programs:
    """The three jitted programs, the params placed, the empty one-sequence cache and the B
    slots' cache (arrays, or their shapes for ahead-of-time lowering), and the Sharder."""

    prefill: Callable
    insert: Callable
    generate: Callable
    params: object
    empty1: dict
    cache_B: dict
    sh: Sharder


def _cache_sharding(cfg, sh: Sharder, B: int):
    one = kv_cache.cache_specs(cfg, sh)
    if B == 1:   # one request's cache: not split on the batch, its K heads not repeated
        one = {n: P(None, None, sh.kv, *tuple(s)[3:]) for n, s in one.items()}
    return None if sh.mesh is None else {n: named(sh.mesh, s) for n, s in one.items()}


def _cache_abs(cfg, B: int, repeat: int = 1) -> dict:
    return {n: jax.ShapeDtypeStruct((s.shape[0], B, *s.shape[2:]), s.dtype)
            for n, s in kv_cache.cache_shapes(cfg, repeat).items()}


def _zeros(shapes: dict) -> dict:
    return {n: np.zeros(s.shape, s.dtype) for n, s in shapes.items()}


def _write_rows(c: dict, layer, k_BTKH, v_BTKH, pos_B) -> dict:
    """Each slot's new K/V (T = 1) at its own position ``pos_B[b]``: a scatter into the stacked
    [L, B, K, S, H] cache (int8 with its scales where the cache is)."""
    B = pos_B.shape[0]
    rows = jnp.arange(B)
    out = {}
    for name, x in (("k", k_BTKH[:, 0]), ("v", v_BTKH[:, 0])):
        if f"{name}_scale_LBKS" in c:
            x, scale = kv_cache.quantize(x)
            buf = c[f"{name}_scale_LBKS"]
            out[f"{name}_scale_LBKS"] = buf.at[layer, rows, :, pos_B].set(scale.astype(buf.dtype))
        buf = c[f"{name}_LBKSH"]
        out[f"{name}_LBKSH"] = buf.at[layer, rows, :, pos_B].set(x.astype(buf.dtype))
    return out


def step_rows(params, cache, tokens_B1, pos_B, cfg, sh: Sharder):
    """One token for each of B slots at positions ``pos_B``: (logits [B, V], cache)."""
    d, dtype = dims_of(cfg), jnp.dtype(cfg.dtype)
    x = sh.act(model.embed(params["embed_VD"], tokens_B1).astype(dtype), "BTD")
    pos_BT = pos_B[:, None]
    specs = kv_cache.cache_specs(cfg, sh)

    def body(carry, w_and_layer):
        x, c = carry
        w, layer = w_and_layer

        def kv_fn(k, v):
            c_new = _write_rows(c, layer, kv_cache.stored(k, sh), kv_cache.stored(v, sh), pos_B)
            if sh.mesh is not None:   # the cache keeps its layout through the scatter
                c_new = {n: jax.lax.with_sharding_constraint(a, named(sh.mesh, specs[n]))
                         for n, a in c_new.items()}
            read = (kv_cache.read(c_new, layer, n, dtype) for n in ("k", "v"))
            return (*read, True, c_new)

        return model.block(x, w, pos_BT, d, sh, kv_fn), None

    layers = (params["layers"], jnp.arange(cfg.L, dtype=jnp.int32))
    (x, cache), _ = model.run_layers(body, (x, cache), layers, cfg.scan_layers)
    return model.logits(params, x, d, sh)[:, -1], cache


def _arrays(cfg: GenerateConfig, abstract: bool, shapes: tuple, shardings: tuple | None,
            placed: tuple | None) -> tuple:
    """``(params, empty one-sequence cache, B slots' cache)``: placed afresh from the host, or,
    given ``placed`` (``build``'s params and B slots' cache, already on the mesh), those same
    arrays with only the one-sequence cache placed beside them."""
    if placed is None:
        return tuple(build_args(abstract, shapes, shardings, lambda: (
            serve.host_params(cfg), _zeros(shapes[1]), _zeros(shapes[2]))))
    params, cache_B = placed
    empty1 = build_args(abstract, shapes[1], None if shardings is None else shardings[1],
                        lambda: _zeros(shapes[1]))
    return params, empty1, cache_B


def programs(cfg: GenerateConfig, mesh: AnyMesh | None, abstract: bool = False,
             placed: tuple | None = None) -> Programs:
    """Compile-ready prefill, insert and generate on ``mesh`` (None: one device), params and the
    empty caches placed (``abstract``: their shapes with shardings, for ahead-of-time
    lowering; ``placed``: ``(params, cache_B)`` a ``build`` on the same mesh placed, used as
    they are rather than placed a second time)."""
    kv_cache.only_decode(cfg, "llama_generate")
    d, sh, p_abs = serve._setup(cfg, mesh)
    mesh = sh.mesh
    plain = Sharder(None, "dp_tp", d)   # one request: let the weights' split lead (no B to split)
    c1, cB = _cache_sharding(cfg, sh, 1), _cache_sharding(cfg, sh, cfg.B)

    def prefill(params, cache1, tokens_1T, start, length):
        logits, cache1 = serve.extend(params, cache1, tokens_1T, start, cfg, plain)
        last = jax.lax.dynamic_index_in_dim(logits[0], length - 1, keepdims=False)
        return jnp.argmax(last).astype(jnp.int32), cache1

    def insert(cache_B, cache1, slot):
        # the request's cache (prefilled unsplit, K heads) stored as the slots' are (K' heads)
        return {n: jax.lax.dynamic_update_slice_in_dim(
                    cache_B[n], kv_cache.stored(cache1[n], sh), slot, axis=1)
                for n in cache_B}

    def generate(params, cache_B, tokens_B1, pos_B):
        logits, cache_B = step_rows(params, cache_B, tokens_B1, pos_B, cfg, sh)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)[:, None], cache_B

    shapes = (p_abs, _cache_abs(cfg, 1), _cache_abs(cfg, cfg.B, sh.kv_repeat))
    if mesh is None:
        jits = (jax.jit(prefill), jax.jit(insert, donate_argnums=0),
                jax.jit(generate, donate_argnums=1))
        return Programs(*jits, *_arrays(cfg, abstract, shapes, None, placed), sh)
    p_sh, rep = sh.param_shardings(p_abs), named(mesh, P())
    tok = sh.sharding("BT")
    jits = (jax.jit(prefill, in_shardings=(p_sh, c1, rep, rep, rep), out_shardings=(rep, c1)),
            jax.jit(insert, in_shardings=(cB, c1, rep), out_shardings=cB, donate_argnums=0),
            jax.jit(generate, in_shardings=(p_sh, cB, tok, named(mesh, P(sh.batch))),
                    out_shardings=(tok, cB), donate_argnums=1))
    return Programs(*jits, *_arrays(cfg, abstract, shapes, (p_sh, c1, cB), placed), sh)


def build(cfg: GenerateConfig, mesh: AnyMesh | None, abstract: bool = False):
    """``(generate, (params, cache_B, tokens_B1, pos_B))``: the generate program at B slots,
    every slot at the last position (the full context read, as ``llama_decode`` reads it);
    ``abstract``: their shapes, for ahead-of-time lowering (a TPU slice)."""
    progs = programs(cfg, mesh, abstract)
    sh = progs.sh
    shapes = (jax.ShapeDtypeStruct((cfg.B, 1), jnp.int32),
              jax.ShapeDtypeStruct((cfg.B,), jnp.int32))
    shardings = None if sh.mesh is None else (sh.sharding("BT"), named(sh.mesh, P(sh.batch)))
    tok, pos = build_args(abstract, shapes, shardings, lambda: (
        serve.tokens(cfg, 1), np.full((cfg.B,), cfg.S - 1, np.int32)))
    return progs.generate, (progs.params, progs.cache_B, tok, pos)


def carry(args: tuple, out: tuple) -> tuple:
    """The next step's arguments: the cache just returned (the one passed in was donated)."""
    params, _, tokens_B1, pos_B = args
    return params, out[1], tokens_B1, pos_B


class StreamLoop:
    """The request loop as ``harness run`` captures it (``harness.capture.loop``): ``warm``
    builds the programs on the mesh and compiles all three, on the params and B slots' cache
    ``args`` (``build``'s arguments, already placed: not placed twice; None: placed here),
    ``run`` serves the seeded stream
    (what the trace holds: every prefill, insert and generate, and the host between them),
    ``figures`` its record beside the prediction on a chip; ``programs`` names each program's
    compilation as the trace does (``jit_`` and its function), ``step_program`` the one the
    report is of: generate, the bulk of serving's time."""

    def __init__(self, cfg: GenerateConfig, mesh: AnyMesh | None, args: tuple | None = None):
        self.cfg, self.mesh = cfg, mesh
        self.placed = tuple(args[:2]) if args else None   # (params, cache_B)
        self.progs: Programs | None = None
        self.slots: generate_loop.Slots | None = None
        self.programs: dict[str, str] = {}

    @property
    def step_program(self) -> str:
        return self.programs.get(generate_loop.GENERATE, "")

    def warm(self) -> None:
        self.progs = programs(self.cfg, self.mesh, placed=self.placed)
        self.programs = {name: f"jit_{getattr(self.progs, name).__name__}"
                         for name in generate_loop.PROGRAMS}
        self.slots = generate_loop.warm_up(self.cfg, self.progs)

    def run(self) -> generate_loop.Stream:
        prefix, reqs = generate_loop.requests(self.cfg)
        return generate_loop.serve(self.cfg, self.progs, prefix, reqs, self.slots)

    def figures(self, stream: generate_loop.Stream, chip) -> dict:
        """``generate_loop.figures`` on ``chip`` (None: no prediction), each program's calls
        under its compilation's name."""
        out = generate_loop.figures(self.cfg, self.progs.sh.mesh, chip, stream)
        out["calls"] = {self.programs[k]: n for k, n in out["calls"].items()}
        return out


@dataclass(frozen=True)
class ServingWorkload(Workload):
    """A workload whose run is a loop of several programs driven from Python:
    ``loop(cfg, mesh, args)`` gives the loop ``harness run`` captures whole in place of
    ``build``'s one program, reusing the arrays ``build`` placed (``args``) (``harness.capture.
    loop``: ``warm``, ``run``, ``figures``, ``programs``, ``step_program``)."""

    loop: Callable[[object, object, tuple | None], StreamLoop] | None = None


WORKLOAD = ServingWorkload(
    name="llama_generate",
    Config=GenerateConfig,
    build=build,
    presets=PRESETS,
    description="LLaMA-3 serving: R requests through B slots, continuous batching, prefix cache",
    carry=carry,
    memory=memory.serve_bytes,
    book=book.decode,
    memory_knobs=smaller("B", "S", "T"),
    loop=StreamLoop,
)
