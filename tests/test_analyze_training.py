"""``harness.analyze`` on training code written the way the public Flax NNX and JAX examples
write it: an ``nnx.Module`` MLP with ``nnx.Optimizer(optax.adamw)`` under ``nnx.jit``, data
parallel and FSDP over a ("data", "model") mesh (flax's nnx_toy_examples 04 and 10), and a
plain-JAX Optax step under ``jax.set_mesh`` with explicit axes and a static keyword argument
(jax's explicit-sharding MNIST example). No warm-up step is run by hand before any of them."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import harness
from harness import schema

STEPS, WARMUP = 3, 1
D, F = 4, 64  # the data-parallel MLP: D -> F -> D
F_FSDP = 32   # the FSDP MLP: 1 -> F_FSDP -> 1, as flax's example


class MLP(nnx.Module):  # flax's 04_data_parallel_with_jit
    def __init__(self, din, dmid, dout, *, rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        return self.linear2(nnx.relu(self.linear1(x)))


class ShardedMLP(nnx.Module):  # flax's 10_fsdp_and_optimizer: parameters annotated by axis
    def __init__(self, din, dmid, dout, rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (din, dmid)), out_sharding=(None, "model"))
        self.b1 = nnx.Param(jnp.zeros((dmid,)), out_sharding=("model",))
        self.w2 = nnx.Param(init(rngs.params(), (dmid, dout)), out_sharding=(None, "model"))

    def __call__(self, x):
        return nnx.relu(x @ self.w1 + self.b1) @ self.w2


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((y - m(x)) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def fit(model, optimizer, x, y):  # the same step under another name, jitted below
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((y - m(x)) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def _specs(*nodes) -> dict[str, str]:
    """Every array's partition spec in the NNX objects' state, read from the arrays, by
    "<object's position>.<path>" ("0.w1")."""
    return {f"{i}." + ".".join(map(str, path)): str(var[...].sharding.spec)
            for i, node in enumerate(nodes)
            for path, var in nnx.to_flat_state(nnx.state(node))}


def _all_reduce_bytes(run) -> float:
    ops = run.ops
    return float(ops.loc[ops[schema.COLLECTIVE] == "all-reduce", schema.COMM_BYTES].sum())


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory):
    """flax's 04 example: parameters and optimizer state replicated, the batch split over 8."""
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    model = MLP(D, F, D, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    state = jax.device_put(nnx.state((model, optimizer)), NamedSharding(mesh, P()))
    nnx.update((model, optimizer), state)
    x, y = jax.device_put((np.ones((32, D), np.float32), np.zeros((32, D), np.float32)),
                          NamedSharding(mesh, P("data")))
    before = _specs(model, optimizer)
    run = harness.analyze(nnx.jit(fit), model, optimizer, x, y, steps=STEPS, warmup=WARMUP,
                          chip="h100", out_dir=tmp_path_factory.mktemp("dp"))
    return run, optimizer, before, _specs(model, optimizer)


def test_data_parallel_gradients_are_all_reduced_whole(data_parallel):
    run, _, _, _ = data_parallel
    # every parameter's f32 gradient (linear1: D x F + F, linear2: F x D + D) and the loss's
    # partial sum over the batch shards, summed over the 8 devices
    assert _all_reduce_bytes(run) == 4 * ((D * F + F) + (F * D + D) + 1)
    ops = run.ops
    assert set(ops.loc[ops[schema.COLLECTIVE] == "all-reduce", schema.GROUP_SIZE]) == {8}
    assert run.meta[schema.MESH] == {"data": 8}


def test_each_call_steps_the_callers_optimizer_once(data_parallel):
    run, optimizer, before, after = data_parallel
    assert after == before  # replicated in, replicated out: one compilation, no note
    assert not any("compiled" in n and "warm-up" in n for n in run.notes)
    # warm-up, the traced steps, then as many untimed-by-trace steps
    assert int(optimizer.step[...]) == WARMUP + 2 * STEPS
    assert sorted(run.steps[schema.STEP].unique()) == list(range(STEPS))
    assert len(run.meta[schema.STEP_TIMES_S]) == STEPS
    assert run.meta[schema.PROGRAM] == "jit_fit"


def _fsdp(mesh):
    @nnx.jit
    def create_model():
        model = ShardedMLP(1, F_FSDP, 1, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    with jax.set_mesh(mesh):
        model, optimizer = create_model()
    x = jnp.linspace(-2, 2, 32)[:, None]
    x, y = jax.device_put((x, 0.8 * x ** 2), NamedSharding(mesh, P("data")))
    return model, optimizer, x, y


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    """flax's 10 example, called inside ``with mesh:``: a step whose updated parameters come
    back with other shardings than they went in with (XLA lays the updates out as it likes)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    model, optimizer, x, y = _fsdp(mesh)
    before = _specs(model, optimizer)
    with pytest.warns(DeprecationWarning), mesh:  # jax deprecates `with mesh:`; still works
        run = harness.analyze(train_step, model, optimizer, x, y, steps=STEPS, warmup=WARMUP,
                              chip="h100", out_dir=tmp_path_factory.mktemp("fsdp"))
    return run, model, optimizer, before, _specs(model, optimizer)


def _recompile_notes(run) -> list[str]:
    return [n for n in run.notes if "compiled 2 times in warm-up" in n]


def test_fsdp_step_settles_after_one_recompile_named_in_a_note(fsdp):
    run, model, optimizer, before, after = fsdp
    changed = {k for k in before if before[k] != after[k]}
    assert changed, "the step kept every sharding: nothing to recompile for"
    (note,) = _recompile_notes(run)
    # the note names a changed model parameter as the caller's arrays show it
    shown = {f"model.{k[2:]}: sharding {before[k]} -> {after[k]}"
             for k in changed if k.startswith("0.")}
    assert any(s in note for s in shown), (note, shown)
    assert f"{len(changed)} arrays in all" in note
    # one more warm-up step ran on the second compilation before tracing
    assert int(optimizer.step[...]) == WARMUP + 1 + 2 * STEPS
    assert sorted(run.steps[schema.STEP].unique()) == list(range(STEPS))
    assert run.meta[schema.MESH] == {"data": 2, "model": 4}


def test_keep_state_leaves_the_callers_model_and_optimizer_as_they_were(tmp_path):
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    model, optimizer, x, y = _fsdp(mesh)
    before, w1 = _specs(model, optimizer), np.asarray(model.w1[...])
    run = harness.analyze(train_step, model, optimizer, x, y, steps=1, warmup=1, chip="h100",
                          out_dir=tmp_path, keep_state=True)
    assert _recompile_notes(run)  # the clones' shardings changed, as the caller's would have
    assert _specs(model, optimizer) == before
    assert int(optimizer.step[...]) == 0
    assert np.array_equal(np.asarray(model.w1[...]), w1)


# jax's explicit-sharding MNIST example's pattern, with an Optax optimizer
B, D_IN, D_H, D_OUT = 64, 16, 32, 8
tx = optax.adam(1e-3)


def _loss(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w_in"] + params["b"])
    return jnp.mean((h @ params["w_out"] - y) ** 2)


def apply_grads(params, opt_state, batch, clip=1.0):
    grads = jax.tree.map(lambda g: jnp.clip(g, -clip, clip), jax.grad(_loss)(params, batch))
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def test_plain_jax_under_set_mesh_with_a_static_keyword(tmp_path):
    mesh = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Explicit,))
    rng = np.random.default_rng(0)
    step = jax.jit(apply_grads, static_argnames=("clip",))
    seen = []

    def carry(args, out):
        seen.append(int(out[1][0].count))  # adam's step count, in the Optax state pytree
        return (*out, args[2])

    with jax.set_mesh(mesh):
        params = jax.device_put({"w_in": rng.normal(size=(D_IN, D_H)).astype(np.float32),
                                 "b": np.zeros(D_H, np.float32),
                                 "w_out": rng.normal(size=(D_H, D_OUT)).astype(np.float32)},
                                P())
        batch = jax.device_put((rng.normal(size=(B, D_IN)).astype(np.float32),
                                rng.normal(size=(B, D_OUT)).astype(np.float32)), P("batch"))
        run = harness.analyze(step, params, tx.init(params), batch, clip=0.5, carry=carry,
                              steps=STEPS, warmup=WARMUP, chip="h100", out_dir=tmp_path)
    # the replicated parameters' f32 gradients, reduced over the batch shards
    assert _all_reduce_bytes(run) == 4 * (D_IN * D_H + D_H + D_H * D_OUT)
    assert run.meta[schema.MESH] == {"batch": 8}
    assert seen == list(range(1, WARMUP + 2 * STEPS + 1))  # one Optax update per call
    assert not _recompile_notes(run)
