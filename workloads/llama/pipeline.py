"""``llama_train`` pipelined: the layers over the mesh's ``stage`` axis (`training.md` and
`gpus.md` on pipelining, reference §6.2; the schedules are ``workloads.llama.schedules``).

Written the way MaxText's pipeline runs (``maxtext/layers/pipeline.py``, read, not copied):

- Stacked stage weights. ``params["layers"]`` keeps its [L, ...] stack, split over the stage
  axis in blocks, so stage s holds stack rows [s·L/S, (s+1)·L/S). A circular pipeline with v
  repeats stores the layers in stage order: stack row (s·v + r)·L/(S·v) + j is model layer
  (r·S + s)·L/(S·v) + j (``model_layer``), so each stage's block is its v chunks and no step
  moves weights between stages.
- One loop over ticks (``lax.scan``) inside a ``shard_map`` manual over the stage axis only
  (data, FSDP and TP stay XLA's, through the model's own sharding constraints): every stage
  runs its chunk every tick, valid microbatch or not (the bubble is that work on invalid
  microbatches), then hands its output to the next stage with one ``ppermute`` (stage S−1 to
  stage 0 as well: a circular pipeline's next repeat; MaxText's circular storage keeps it at
  stage 0 until microbatch k mod M's turn comes, M >= S).
- GPipe and circular get their backward from autodiff of the loop (every forward, then every
  backward: GPipe's order, its residuals for all M microbatches held); 1F1B runs its own
  per-microbatch backward (``workloads.llama.one_f_one_b``).

Embedding and the loss head run outside the pipeline with the batch split over the stage axis
too (every device works on them, none redundantly). Microbatch m is sequences m, m + M, ...
(``workloads.llama.microbatches``: a reshape that keeps each device's rows).
"""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from predictions import layouts
from workloads.base import WorkloadError
from workloads.llama import loss, model, schedules
from workloads.llama.microbatches import microbatch, unmicrobatch
from workloads.llama.sharding import Sharder
from workloads.mesh import AnyMesh, axis_size


def stage_axes_of(parallelism: str, mesh: AnyMesh | None) -> tuple[str, ...]:
    """The mesh axes of the layout's stage role; () unsplit or without one."""
    if mesh is None:
        return ()
    try:
        return layouts.stage_axes(layouts.layout(parallelism), dict(mesh.shape))
    except ValueError as e:
        raise WorkloadError(str(e)) from None


def check_mesh(cfg, mesh: AnyMesh | None) -> tuple[str, ...]:
    """The stage axes, checked against ``stages`` (WorkloadError naming the choices)."""
    stage = stage_axes_of(cfg.parallelism, mesh)
    if cfg.stages > 1 and mesh is not None and not stage:
        pp = ", ".join(n for n, e in layouts.LAYOUTS.items() if "stage" in e.axes)
        raise WorkloadError(f"stages={cfg.stages} needs a layout with a stage axis, got "
                            f"parallelism={cfg.parallelism}; valid: {pp}")
    if stage and axis_size(mesh, stage) != cfg.stages:
        n = axis_size(mesh, stage)
        raise WorkloadError(f"stages={cfg.stages} but the mesh's stage axis {'x'.join(stage)} "
                            f"has {n} devices; set --set stages={n} or give the stage axis "
                            f"{cfg.stages} devices (--mesh stage={cfg.stages},data=...)")
    _check_microbatch(cfg, mesh)
    _check_1f1b(cfg, mesh)
    return stage


def _check_1f1b(cfg, mesh: AnyMesh | None) -> None:
    """1F1B's explicit backward beside both a batch axis and a model axis aborts XLA's SPMD
    partitioner (jax 0.10.2: "partition_group_list.num_replica_groups() * ...", in the loss
    head's ``jax.vjp`` inside the stage loop): one line instead of a crashed process."""
    if mesh is None or schedules.SCHEDULES[cfg.schedule].autodiff:
        return
    split = layouts.split(layouts.layout(cfg.parallelism), dict(mesh.shape))
    if all(split[k] and axis_size(mesh, split[k]) > 1 for k in ("batch", "model")):
        ok = ", ".join(n for n in ("pp", "pp+fsdp", "pp+tp") if n in layouts.LAYOUTS)
        raise WorkloadError(f"schedule=1f1b with {cfg.parallelism} (a batch axis and a model "
                            f"axis beside the stages) aborts XLA's SPMD partitioner in jax "
                            f"{jax.__version__}; valid for 1f1b: {ok}, or schedule=gpipe or "
                            f"circular with {cfg.parallelism}")


def _check_microbatch(cfg, mesh: AnyMesh | None) -> None:
    """B/M sequences a microbatch must split over the batch axes (one line naming M's
    choices)."""
    if mesh is None or cfg.microbatches == 1:
        return
    try:
        batch = layouts.split(layouts.layout(cfg.parallelism), dict(mesh.shape))["batch"]
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    n = axis_size(mesh, batch) if batch else 1
    if (cfg.B // cfg.microbatches) % n:
        ok = ", ".join(str(k) for k in range(1, cfg.B + 1)
                       if cfg.B % k == 0 and (cfg.B // k) % n == 0)
        raise WorkloadError(f"microbatches={cfg.microbatches} leave B/M={cfg.B // cfg.microbatches}"
                            f" sequences a microbatch, not divisible by the {n} devices of the "
                            f"batch axes {'x'.join(batch)}; valid microbatches: {ok} (or a "
                            f"larger --set B)")


def model_layer(i: int, L: int, S: int, v: int) -> int:
    """The model layer that stack row ``i`` holds (circular storage order; identity if v=1)."""
    lps = L // (S * v)
    s, rest = divmod(i, v * lps)
    r, j = divmod(rest, lps)
    return (r * S + s) * lps + j


# a padded stack's per-row flag: a real layer (1) or an identity row (0) (``stack_rows``)
ACTIVE = "active_rows"


def stack_rows(cfg) -> int:
    """Rows of the pipelined layer stack: L, or with ``pad_layers`` the next multiple of S·v,
    the extra rows identity layers at the start and the end of the pipeline (Meta's LLaMA-3
    405B: 126 layers on 16 stages, one fewer on the first and the last)."""
    chunk = cfg.stages * (cfg.repeats if schedules.SCHEDULES[cfg.schedule].circular else 1)
    return -(-cfg.L // chunk) * chunk if cfg.pad_layers else cfg.L


def active_rows(cfg):
    """Per stack row (storage order), 1.0 for a model layer, 0.0 for a padding row; None
    when the stack is not padded."""
    rows = stack_rows(cfg)
    if rows == cfg.L:
        return None
    v = cfg.repeats if schedules.SCHEDULES[cfg.schedule].circular else 1
    front = (rows - cfg.L + 1) // 2
    runs = [model_layer(i, rows, cfg.stages, v) for i in range(rows)]
    return np.array([1.0 if front <= e < front + cfg.L else 0.0 for e in runs], np.float32)


def with_active(layers, cfg):
    """The layer stack with its padding flags (``ACTIVE``) where it is padded."""
    flags = active_rows(cfg)
    return layers if flags is None else {**layers, ACTIVE: jnp.asarray(flags)}


def batch_over_stages(sh: Sharder, stage: tuple[str, ...]) -> Sharder:
    """``sh`` with the batch also split over the stage axes (embedding and loss head)."""
    out = copy.copy(sh)
    b = tuple(stage) + tuple(sh.layout.batch)
    b = b[0] if len(b) == 1 else b
    out.act_specs = {k: (v if k == "DV" else P(b, *tuple(v)[1:]))
                     for k, v in sh.act_specs.items()}
    return out


class _InStage(Sharder):
    """A Sharder for code inside the stage-manual ``shard_map``: its constraints name the
    context's mesh (the stage axis manual there), so a ``jax.vjp`` traced inside matches it."""

    def act(self, x, letters_: str):
        mesh = jax.sharding.get_abstract_mesh()
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, self.act_specs[letters_]))


def in_stage(sh: Sharder) -> Sharder:
    """``sh`` for use inside the stage loop (``_InStage``); unsharded stays unsharded."""
    if sh.mesh is None:
        return sh
    out = copy.copy(sh)
    out.__class__ = _InStage
    return out


def stage_param_specs(sh: Sharder, params, stage: tuple[str, ...]):
    """The params' specs with the layer stack's leading L split over the stage axes."""
    lead = stage[0] if len(stage) == 1 else stage

    def spec(path, s):
        return P(lead, *tuple(s)[1:]) if path[0].key == "layers" else s

    return jax.tree_util.tree_map_with_path(spec, sh.param_specs(params),
                                            is_leaf=lambda x: isinstance(x, P))


def stage_fn(cfg, sh: Sharder, d):
    """``f(w_chunk, x_bTD) -> x_bTD``: one chunk of layers (scan and remat as configured).
    ``f(w_stage, x_bTD, r)``: chunk ``r`` of the stage's [v, L/(S·v), ...] weights, each
    layer's weights indexed inside its checkpointed body, so the backward of a loop over ticks
    keeps the stage's weights once, not the chunk it ran at every tick (libtpu: 1.62 TiB of
    temporaries for 405B on 4 stages x 128 microbatches)."""
    def run(w, x, r=None):
        b, T = x.shape[:2]
        pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (b, T))

        def body(x, w_l):
            if r is not None:   # w_l is the layer's index in the chunk
                w_l = jax.tree.map(lambda a: a[r, w_l], w)
            y = model.block(x, w_l, pos, d, sh)[0]
            return (jnp.where(w_l[ACTIVE], y, x) if ACTIVE in w_l else y), None

        xs = w if r is None else jnp.arange(jax.tree.leaves(w)[0].shape[1])
        return model.run_layers(body, x, xs, cfg.scan_layers, cfg.remat_policy())[0]
    return run


def varying(tree, axis: str):
    """``tree`` typed as differing between stages (a loop carry that a stage's work
    changes: ``shard_map``'s varying-axes check); jax 0.10+ ``pcast``, ``pvary`` before."""
    cast = getattr(jax.lax, "pcast", None)
    if cast is not None:
        return jax.tree.map(lambda x: cast(x, (axis,), to="varying"), tree)
    return jax.tree.map(lambda x: jax.lax.pvary(x, (axis,)), tree)


def _take(x, i):
    return jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False)


def _put_if(buf, i, value, ok):
    """``buf[i] = value`` where ``ok`` (one slice read and written, not the whole buffer)."""
    return jax.lax.dynamic_update_index_in_dim(buf, jnp.where(ok, value, _take(buf, i)), i, 0)


def forward(layers, x_MbTD, cfg, sh: Sharder, d, stage: tuple[str, ...]):
    """The pipelined layers over M microbatches [M, b, T, D] (GPipe or circular order):
    their outputs [M, b, T, D], from the last stage."""
    S, M = cfg.stages, cfg.microbatches
    v = cfg.repeats if schedules.SCHEDULES[cfg.schedule].circular else 1
    run = stage_fn(cfg, in_stage(sh), d)
    axis = stage[0]
    ring = [(i, (i + 1) % S) for i in range(S)]

    def per_stage(w, x_in):
        s = jax.lax.axis_index(axis)
        x_in = x_in.astype(x_MbTD.dtype)
        w = jax.tree.map(lambda a: a.reshape(v, a.shape[0] // v, *a.shape[1:]), w)
        zero = jnp.zeros_like(x_in[0])

        def tick(carry, t):
            got, circ, out = carry
            k, valid = schedules.forward_index(t, s, S, M, v)
            kc = jnp.clip(k, 0, M * v - 1)
            m, r = kc % M, kc // M
            first = _take(x_in, m)
            if v > 1:   # stage 0 files what stage S-1 sent last tick (its work t - S)
                kp = t - S
                circ = _put_if(circ, kp % M, got, (s == 0) & (kp >= 0) & (kp < M * (v - 1)))
                first = jnp.where(r == 0, first, _take(circ, m))
            x = jnp.where(s == 0, first, got)
            y = run(w, x, r)
            out = _put_if(out, m, y, (s == S - 1) & valid & (r == v - 1))
            return (jax.lax.ppermute(y, axis, ring), circ, out), None

        circ = jnp.zeros_like(x_in) if v > 1 else zero
        init = varying((zero, circ, jnp.zeros_like(x_in)), axis)
        (_, _, out), _ = jax.lax.scan(tick, init, jnp.arange(M * v + S - 1))
        return out[None]

    w_specs = jax.tree.map(lambda _: P(axis), layers)
    out = jax.shard_map(per_stage, mesh=sh.mesh, in_specs=(w_specs, P()), out_specs=P(axis),
                        axis_names={axis}, check_vma=False)(layers, _crossing(x_MbTD, sh))
    return out[S - 1]


def _crossing(x, sh: Sharder):
    """The pipeline's inputs as they enter the stage loop: their gradient is summed over the
    stages (an all-reduce over the manual stage axis), which XLA:CPU (jax 0.10.2) aborts on
    in bf16 ("Invalid binary instruction opcode copy"): fp32 on a CPU mesh."""
    devices = getattr(sh.mesh, "devices", None)
    on_cpu = devices is not None and devices.flat[0].platform == "cpu"
    return x.astype(jnp.float32) if on_cpu and x.dtype == jnp.bfloat16 else x


def embed(params, inputs_BT, cfg, sh: Sharder):
    """The token embedding with the batch split as ``sh`` splits it (over the stages too): the
    tokens constrained first, or libtpu's partitioner gathers whole-D rows from the D-split
    table ("Slice dim size D greater than dynamic slice dimension D/Y", jax 0.10.2)."""
    inputs_BT = sh.act(inputs_BT, "BT")
    return sh.act(model.embed(params["embed_VD"], inputs_BT).astype(jnp.dtype(cfg.param_dtype)),
                  "BTD")


def loss_fn(params, inputs_BT, targets_BT, cfg, sh: Sharder, d, stage: tuple[str, ...]):
    """Mean next-token cross-entropy, the layers pipelined (GPipe or circular)."""
    outer = batch_over_stages(sh, stage)
    x_BTD = embed(params, inputs_BT, cfg, outer)
    y = forward(with_active(params["layers"], cfg), microbatch(x_BTD, cfg.microbatches), cfg, sh,
                d, stage)
    x_BTD = outer.act(unmicrobatch(y), "BTD")
    return loss.cross_entropy(params, x_BTD, targets_BT, d, outer, cfg.num_vocab_tiling)
