"""Sharded JAX programs in the public patterns of issue 58 (and 53, 54), tiny, for ``harness
explain``.

Each is written as the book's JAX chapter (`jax-stuff.md`) and JAX's own documentation write
them, not as the harness's workloads do:

- ``collective_matmul``: the book's AllGather collective matmul, A[B_X, D_Y] . W[D, F_Y]: a
  ring of ``ppermute``s over Y in a ``fori_loop(..., unroll=True)`` inside ``shard_map``, each
  step a partial matmul of the local chunk accumulated (book §4.1, `jax-stuff.md`);
- ``matmul`` on two meshes: one jitted function compiled on a 4x2 mesh, then on a 2x2 mesh;
- ``fsdp_tp_grad``: an MLP under FSDP + TP in ``shard_map`` (book §6.1: W_in[D_X, F_Y],
  W_out[F_Y, D_X], x[B_X, D]) and its gradient: weights all-gathered over X, activations
  summed over Y, weight gradients reduce-scattered over X;
- ``ref_fsdp_step``: an FSDP training step whose parameters and optimizer state live in
  ``jax.Ref``s (``jax.new_ref``), updated in place;
- ``shard_map_pipeline``, ``fsdp_microbatches``, ``shard_map_moe``: a pipeline of ``ppermute``s,
  FSDP in a microbatch scan, an MoE layer of ``all_to_all``s (issues 53, 54; below).

Each builder returns ``(fn, args)``; shapes are module constants so tests derive bytes from
them by arithmetic.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

# the book's collective matmul, scaled down: A[B, D], W[D, F] on a mesh X=2, Y=4
CM_B, CM_D, CM_F = 64, 128, 256
CM_MESH = {"X": 2, "Y": 4}


def mesh(shape: tuple[int, ...], names: tuple[str, ...], kind=AxisType.Explicit):
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names),
                         devices=jax.devices()[:math.prod(shape)])


def collective_matmul_allgather_lhs_contracting(lhs, rhs):
    """The book's `jax-stuff.md` collective matmul: lhs[B/X, D/Y] shifts around the Y ring
    while each device multiplies the chunk it holds by its rows of rhs[D, F/Y]."""
    axis_size = jax.lax.axis_size("Y")
    idx = jax.lax.axis_index("Y")
    chunk_size = lhs.shape[1]

    def f(i, carrys):
        accum, lhs = carrys
        rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk_size,
                                                 chunk_size)
        update = lhs @ rhs_chunk  # the partial matmul of one chunk
        lhs = jax.lax.ppermute(lhs, axis_name="Y",
                               perm=[(j, (j - 1) % axis_size) for j in range(axis_size)])
        return accum + update, lhs

    accum = jnp.zeros((lhs.shape[0], rhs.shape[1]), dtype=lhs.dtype)
    accum = jax.lax.pcast(accum, ("X", "Y"), to="varying")
    accum, lhs = jax.lax.fori_loop(0, axis_size - 1, f, (accum, lhs), unroll=True)
    i = axis_size - 1
    rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk_size,
                                             chunk_size)
    return accum + lhs @ rhs_chunk


def collective_matmul(unroll: bool = True):
    """(fn, args): A[B_X, D_Y] . W[D, F_Y] -> Out[B_X, F_Y] as the book's collective matmul;
    ``unroll=False`` keeps the ring in a while loop."""
    m = mesh((2, 4), ("X", "Y"))
    a = jax.device_put(jnp.ones((CM_B, CM_D), jnp.float32), NamedSharding(m, P("X", "Y")))
    w = jax.device_put(jnp.ones((CM_D, CM_F), jnp.float32), NamedSharding(m, P(None, "Y")))
    body = collective_matmul_allgather_lhs_contracting
    if not unroll:
        body = _looped
    fn = jax.jit(jax.shard_map(body, mesh=m, in_specs=(P("X", "Y"), P(None, "Y")),
                               out_specs=P("X", "Y")))
    return fn, (a, w)


def _looped(lhs, rhs):
    """The same ring in a rolled ``fori_loop`` (a while loop in the compiled program)."""
    axis_size = jax.lax.axis_size("Y")
    idx = jax.lax.axis_index("Y")
    chunk_size = lhs.shape[1]

    def f(i, carrys):
        accum, lhs = carrys
        rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk_size,
                                                 chunk_size)
        lhs_next = jax.lax.ppermute(lhs, axis_name="Y",
                                    perm=[(j, (j - 1) % axis_size) for j in range(axis_size)])
        return accum + lhs @ rhs_chunk, lhs_next

    accum = jax.lax.pcast(jnp.zeros((lhs.shape[0], rhs.shape[1]), lhs.dtype), ("X", "Y"),
                          to="varying")
    accum, _ = jax.lax.fori_loop(0, axis_size, f, (accum, lhs))
    return accum


# one function, two meshes: x[M, K] sharded on its contracting dimension in both operands
MM_M, MM_K, MM_N = 64, 128, 32


def matmul(x, w):
    return x @ w  # case 3 on either mesh: partial sums over the axis sharding K


def matmul_on(shape: tuple[int, ...]):
    """(fn, args) of ``matmul`` on a mesh of ``shape`` over axes (X, Y), K sharded over Y."""
    m = mesh(shape, ("X", "Y"), AxisType.Auto)
    x = jax.device_put(jnp.ones((MM_M, MM_K), jnp.float32), NamedSharding(m, P("X", "Y")))
    w = jax.device_put(jnp.ones((MM_K, MM_N), jnp.float32), NamedSharding(m, P("Y", None)))
    return jax.jit(matmul), (x, w)


# FSDP + TP MLP in shard_map (book §6.1): x[B_X, D], W_in[D_X, F_Y], W_out[F_Y, D_X]
FT_B, FT_D, FT_F = 64, 64, 128
FT_MESH = {"X": 4, "Y": 2}


def _mlp(params, x):
    w_in = jax.lax.all_gather(params["w_in"], "X", axis=0, tiled=True)   # FSDP: W_in[D, F_Y]
    w_out = jax.lax.all_gather(params["w_out"], "X", axis=1, tiled=True)  # W_out[F_Y, D]
    h = jax.nn.relu(x @ w_in)                                             # [B_X, F_Y]
    out = jax.lax.psum(h @ w_out, "Y")                                    # TP: sum over Y
    return jax.lax.psum(jnp.sum(out ** 2), "X")                          # DP: the loss


def fsdp_tp_grad():
    """(fn, args): the gradient of the FSDP + TP MLP's loss in ``shard_map``; the weight
    gradients come back sharded as the weights (reduce-scattered over X by the transpose of
    the gathers)."""
    m = mesh((4, 2), ("X", "Y"))
    specs = {"w_in": P("X", "Y"), "w_out": P("Y", "X")}
    params = {"w_in": jax.device_put(jnp.ones((FT_D, FT_F), jnp.float32) * 0.01,
                                     NamedSharding(m, specs["w_in"])),
              "w_out": jax.device_put(jnp.ones((FT_F, FT_D), jnp.float32) * 0.01,
                                      NamedSharding(m, specs["w_out"]))}
    x = jax.device_put(jnp.ones((FT_B, FT_D), jnp.float32), NamedSharding(m, P("X", None)))

    def loss(params, x):
        return jax.shard_map(_mlp, mesh=m, in_specs=(specs, P("X", None)), out_specs=P())(
            params, x)

    return jax.jit(jax.grad(loss)), (params, x)


# an FSDP step whose state lives in jax.Refs: params W[L][D_X, D], SGD momentum alike
RS_B, RS_D, RS_L = 64, 64, 2
RS_MESH = {"X": 8}


def _forward(ws, x):
    for w in ws:
        x = jnp.tanh(x @ w)
    return jnp.mean(x ** 2)


def ref_fsdp_step():
    """(fn, args): one SGD-with-momentum step of an L-layer MLP, FSDP over X: each weight
    W[D_X, D] gathered for the matmul, its gradient reduced back to D_X; the weights and
    momenta are ``jax.Ref``s the step updates in place."""
    m = mesh((8,), ("X",), AxisType.Auto)
    wsh, bsh = NamedSharding(m, P("X", None)), NamedSharding(m, P("X", None))
    state = {"params": [jax.new_ref(jax.device_put(jnp.full((RS_D, RS_D), 0.01), wsh))
                        for _ in range(RS_L)],
             "momentum": [jax.new_ref(jax.device_put(jnp.zeros((RS_D, RS_D)), wsh))
                          for _ in range(RS_L)]}
    x = jax.device_put(jnp.ones((RS_B, RS_D)), bsh)

    @jax.jit
    def step(state, x):
        ws = [r[...] for r in state["params"]]
        loss, grads = jax.value_and_grad(_forward)(ws, x)
        for p, mom, g in zip(state["params"], state["momentum"], grads):
            g = jax.lax.with_sharding_constraint(g, wsh)
            mom[...] = 0.9 * mom[...] + g
            p[...] = p[...] - 0.1 * mom[...]
        return loss

    return step, (state, x)


# a bias stored sharded and gathered for the add after a matmul (not a matmul's operand)
BI_B, BI_D, BI_F = 64, 32, 64


def biased(x, w, b, w2):
    h = jax.nn.relu(x @ w + b)  # the gathered bias feeds the add and the relu
    return h @ w2


def bias_gathered():
    """(fn, args): x[B_X, D] . w[D, F] + b[F_X] -> relu -> . w2[F, D] on a mesh X=8: b is
    gathered over X for the add."""
    m = mesh((8,), ("X",), AxisType.Auto)
    put = lambda a, spec: jax.device_put(a, NamedSharding(m, spec))  # noqa: E731
    x = put(jnp.ones((BI_B, BI_D)), P("X", None))
    w = put(jnp.ones((BI_D, BI_F)), P(None, None))
    b = put(jnp.ones((BI_F,)), P("X"))
    w2 = put(jnp.ones((BI_F, BI_D)), P(None, None))
    return jax.jit(biased), (x, w, b, w2)


def out_sharded():
    """(fn, args): the book's Explicit-mode einsum (`jax-stuff.md`) x[M, K_X] . w[K_X, N] with
    ``out_sharding`` P('X', None): a reduce-scatter asked for (book §4.4)."""
    m = mesh((4, 2), ("X", "Y"))
    x = jax.device_put(jnp.ones((MM_M, MM_K)), NamedSharding(m, P(None, "X")))
    w = jax.device_put(jnp.ones((MM_K, MM_N)), NamedSharding(m, P("X", None)))
    out = NamedSharding(m, P("X", None))
    return jax.jit(lambda x, w: jnp.einsum("mk,kn->mn", x, w, out_sharding=out)), (x, w)


# --- issue 53: S stages x 2 replicas, M microbatches of B/M sequences of T tokens, width D ---
PP_S, PP_M, PP_B, PP_T, PP_D, PP_MESH = 4, 4, 16, 8, 32, {"stage": 4, "data": 2}


def _stages(ws, xs):
    """Over (stage, data): ``ws`` [1, D, D] this stage's layer, ``xs`` [M, B/M/X, T, D]. GPipe,
    M + S - 1 ticks: every stage runs its layer, then one ``ppermute`` to the next stage."""
    s, n = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")

    def tick(t, carry):
        state, outs = carry
        y = jnp.tanh(jnp.where(s == 0, xs[t % PP_M], state) @ ws[0])  # stage 0 takes a new one
        outs = outs.at[(t + 1 - n) % PP_M].set(jnp.where(s == n - 1, y, outs[(t + 1 - n) % PP_M]))
        return jax.lax.ppermute(y, "stage", [(i, (i + 1) % n) for i in range(n)]), outs

    init = jax.lax.pcast((jnp.zeros_like(xs[0]), jnp.zeros_like(xs)), "stage", to="varying")
    _, outs = jax.lax.fori_loop(0, PP_M + n - 1, tick, init)
    return jax.lax.psum(jnp.where(s == n - 1, outs, 0.0), "stage")


def shard_map_pipeline(grad: bool = False):
    """(fn, args): the pipeline's loss, or (``grad``) its gradient in the weights."""
    m = mesh((PP_S, 2), ("stage", "data"))
    put = lambda a, spec: jax.device_put(a, NamedSharding(m, spec))
    ws, xs = put(jnp.full((PP_S, PP_D, PP_D), 0.05), P("stage")), put(
        jnp.ones((PP_M, PP_B // PP_M, PP_T, PP_D)), P(None, "data"))
    run = jax.shard_map(_stages, mesh=m, in_specs=(P("stage"), P(None, "data")),
                        out_specs=P(None, "data"))
    loss = lambda ws, xs: jnp.mean(run(ws, xs) ** 2)
    return jax.jit(jax.grad(loss) if grad else loss), (ws, xs)


GA_L, GA_M, GA_B, GA_D, GA_MESH = 2, 4, 64, 64, {"X": 8}  # issue 53: FSDP in a microbatch scan


def _accumulated(ws, xs):
    """The gradient summed over microbatches by a scan; each W[D_X, D] gathered in the layer
    scan just in time (ZeRO-3), again for each microbatch."""
    step = lambda x, w: (jnp.tanh(x @ jax.lax.all_gather(w, "X", tiled=True)), None)
    layers = lambda ws, x: jax.lax.scan(step, x, ws)[0]
    micro = lambda acc, x: (acc + jax.grad(lambda v: jnp.mean(layers(v, x) ** 2))(ws), None)
    return jax.lax.scan(micro, jnp.zeros_like(ws), xs)[0]


def fsdp_microbatches():
    """(fn, args): ``_accumulated`` in ``shard_map`` on a mesh X=8."""
    m = mesh((8,), ("X",))
    ws = jax.device_put(jnp.full((GA_L, GA_D, GA_D), 0.01), NamedSharding(m, P(None, "X")))
    xs = jax.device_put(jnp.ones((GA_M, GA_B // GA_M, GA_D)), NamedSharding(m, P(None, "X")))
    return jax.jit(jax.shard_map(_accumulated, mesh=m, in_specs=(P(None, "X"), P(None, "X")),
                                 out_specs=P(None, "X"))), (ws, xs)


# --- issue 54: E experts over Z devices, k a token, T tokens of width D a device, MLPs [D, F];
# C = 2·T·k/E slots an expert (capacity factor 2: half are padding when routing is even) ------
MOE_E, MOE_Z, MOE_K, MOE_T, MOE_D, MOE_F, MOE_CAPACITY = 8, 4, 2, 32, 32, 64, 2
MOE_C, MOE_MESH = MOE_CAPACITY * MOE_T * MOE_K // MOE_E, {"expert": MOE_Z}


def _moe(x, router, w_in, w_out):
    """Tokens ``x`` [T, D] to their top k experts: a one-hot einsum into [E, C, D], all_to_all,
    the per-expert MLP (w_in [E/Z, D, F], w_out [E/Z, F, D]), all_to_all back, combined."""
    gates, chosen = jax.lax.top_k(jax.nn.softmax(x @ router), MOE_K)      # [T, k]
    picked = jax.nn.one_hot(chosen, MOE_E)                                 # [T, k, E]
    slot = (jnp.cumsum(picked.reshape(-1, MOE_E), axis=0).reshape(picked.shape) * picked - 1
            ).astype(jnp.int32)
    kept = jax.nn.one_hot(slot, MOE_C) * (slot < MOE_C)[..., None]         # [T, k, E, C]
    buf = jnp.einsum("td,tec->ecd", x, kept.sum(1))                        # [E, C, D]
    buf = jax.lax.all_to_all(buf, "expert", 0, 1, tiled=True)              # [E/Z, Z·C, D]
    out = jnp.einsum("ecf,efd->ecd", jax.nn.relu(jnp.einsum("ecd,edf->ecf", buf, w_in)), w_out)
    out = jax.lax.all_to_all(out, "expert", 1, 0, tiled=True)              # [E, C, D]
    return jnp.einsum("ecd,tec->td", out, (kept * gates[..., None, None]).sum(1))


def shard_map_moe(grad: bool = False):
    """(fn, args): the MoE layer's loss, or (``grad``) its gradient in the expert weights."""
    m = mesh((MOE_Z,), ("expert",))
    put = lambda a, spec: jax.device_put(a, NamedSharding(m, spec))
    x = put(jnp.linspace(-1, 1, MOE_Z * MOE_T * MOE_D).reshape(-1, MOE_D), P("expert"))
    router = put(jnp.linspace(-1, 1, MOE_D * MOE_E).reshape(MOE_D, MOE_E), P())
    w_in, w_out = (put(jnp.full(s, 0.02), P("expert")) for s in ((MOE_E, MOE_D, MOE_F),
                                                                  (MOE_E, MOE_F, MOE_D)))
    layer = jax.shard_map(_moe, mesh=m, in_specs=(P("expert"), P(), P("expert"), P("expert")),
                          out_specs=P("expert"))
    loss = lambda w_in, w_out, x, router: jnp.mean(layer(x, router, w_in, w_out) ** 2)
    return jax.jit(jax.grad(loss, argnums=(0, 1)) if grad else loss), (w_in, w_out, x, router)
