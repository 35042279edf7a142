"""1F1B (PipeDream-flush, Narayanan et al. 2021; `gpus.md` on pipelining, reference §6.2):
each stage's forward and backward per microbatch, run explicitly, since autodiff of a loop
gives GPipe's order (every forward before any backward).

A tick (``workloads.llama.schedules``, ``1f1b``) has a forward slot and a backward slot per
stage: stage s forwards microbatch t − s and back-propagates microbatch t − (2S − 2 − s). Each
slot is a ``lax.cond`` on the stage's own index inside a ``shard_map`` manual over the stage
axis, so a stage with nothing to do in a slot does nothing (the bubble is idle time here, not
work on invalid microbatches). After the slots, activations go one stage on and gradients one
stage back (two ``ppermute``s).

What a stage keeps between a microbatch's forward and its backward is the stage's input (a
ring of min(M, 2S − 1) slots), and its backward recomputes the stage's forward under
``jax.vjp``: stage-level rematerialisation, the extra forward the price of keeping S-ish inputs
instead of every layer's residuals (``schedules.in_flight``: 2(S − s) − 1 in this lockstep
form). The last stage runs the final norm, the unembedding and the loss in its backward slot,
the tick of its forward. Weight gradients accumulate in fp32 over the microbatches.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.llama import loss, pipeline, schedules
from workloads.llama.microbatches import microbatch, unmicrobatch
from workloads.llama.sharding import Sharder

HEAD_KEYS = ("final_norm_D", "unembed_DV")


def _zeros32(tree):
    return jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float32), tree)


def _add32(acc, g):
    return jax.tree.map(lambda a, b: a + b.astype(jnp.float32), acc, g)


def _run(layers, head, x_MbTD, t_MbT, cfg, sh: Sharder, d, axis: str):
    """(loss, d_layers fp32, d_head fp32, dx [M, b, T, D]) over the S stages."""
    S, M = cfg.stages, cfg.microbatches
    K = min(M, 2 * S - 1)
    sh = pipeline.in_stage(sh)
    stage = pipeline.stage_fn(cfg, sh, d)
    up = [(i, i + 1) for i in range(S - 1)]
    down = [(i + 1, i) for i in range(S - 1)]


    def per_stage(w, h, x_in, t_in):
        s = jax.lax.axis_index(axis)
        w = dict(w)
        flags = {k: w.pop(k) for k in [pipeline.ACTIVE] if k in w}   # not differentiated
        run = lambda w_, x_: stage(dict(w_, **flags), x_)  # noqa: E731
        zero = jnp.zeros_like(x_in[0])

        def head_loss(w, h, x, t):   # the last stage: its layers, then its microbatch's loss
            return loss.cross_entropy(h, run(w, x), t, d, sh, cfg.num_vocab_tiling) / M

        def backward(m, x, g):
            def last(_):
                value, vjp = jax.vjp(lambda w_, h_, x_: head_loss(w_, h_, x_,
                                                                  pipeline._take(t_in, m)),
                                     w, h, x)
                return (*vjp(jnp.ones((), value.dtype)), value.astype(jnp.float32))

            def middle(_):
                _, vjp = jax.vjp(run, w, x)
                dw, dx = vjp(g)
                return dw, jax.tree.map(jnp.zeros_like, h), dx, jnp.zeros((), jnp.float32)

            return jax.lax.cond(s == S - 1, last, middle, None)

        def idle(*_):
            return (jax.tree.map(jnp.zeros_like, w), jax.tree.map(jnp.zeros_like, h), zero,
                    jnp.zeros((), jnp.float32))

        def tick(carry, t):
            got_x, got_g, stash, dw, dh, dx_out, total = carry
            kf, okf = schedules.forward_index(t, s, S, M)
            mf = jnp.clip(kf, 0, M - 1)
            x = jnp.where(s == 0, pipeline._take(x_in, mf), got_x)
            stash = pipeline._put_if(stash, mf % K, x, okf)
            y = jax.lax.cond(okf & (s < S - 1), lambda: run(w, x), lambda: zero)
            mb, okb = schedules.backward_index(t, s, S, M)
            mb = jnp.clip(mb, 0, M - 1)
            dw_m, dh_m, dx, part = jax.lax.cond(okb, backward, idle, mb,
                                                pipeline._take(stash, mb % K), got_g)
            dx_out = pipeline._put_if(dx_out, mb, dx, okb & (s == 0))
            carry = (jax.lax.ppermute(y, axis, up), jax.lax.ppermute(dx, axis, down), stash,
                     _add32(dw, dw_m), _add32(dh, dh_m), dx_out, total + part)
            return carry, None

        init = (zero, zero, jnp.zeros((K, *x_in.shape[1:]), x_in.dtype), _zeros32(w),
                _zeros32(h), jnp.zeros_like(x_in), jnp.zeros((), jnp.float32))
        (_, _, _, dw, dh, dx_out, total), _ = jax.lax.scan(tick, init,
                                                          jnp.arange(M + 2 * S - 2))
        # the loss and the head's gradient live on the last stage: summed over the stages
        return (jax.lax.psum(total, axis), dw, jax.lax.psum(dh, axis), dx_out[None])

    flagged = pipeline.with_active(layers, cfg)
    specs = jax.tree.map(lambda _: P(axis), layers)
    h_specs = jax.tree.map(lambda _: P(), head)
    return jax.shard_map(per_stage, mesh=sh.mesh,
                         in_specs=(jax.tree.map(lambda _: P(axis), flagged), h_specs, P(), P()),
                         out_specs=(P(), specs, h_specs, P(axis)), axis_names={axis},
                         check_vma=False)(flagged, head, x_MbTD, t_MbT)


def value_and_grads(cfg, sh: Sharder, d, stage: tuple[str, ...]):
    """``f(params, inputs_BT, targets_BT) -> (loss, grads)``: the embedding's forward, the
    pipeline's explicit forward and backward, the embedding's backward from stage 0's input
    gradients."""
    outer = pipeline.batch_over_stages(sh, stage)
    M = cfg.microbatches

    def run(params, inputs_BT, targets_BT):
        x_BTD, embed_vjp = jax.vjp(lambda p: pipeline.embed(p, inputs_BT, cfg, outer),
                                   {"embed_VD": params["embed_VD"]})
        head = {k: params[k] for k in HEAD_KEYS}
        value, d_layers, d_head, dx = _run(params["layers"], head, microbatch(x_BTD, M),
                                           microbatch(targets_BT, M), cfg, sh, d,
                                           stage[0])
        (d_embed,) = embed_vjp(outer.act(unmicrobatch(dx[0]), "BTD"))
        grads = {**d_embed, "layers": d_layers, **d_head}
        return value, jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    return run
