"""A Flax NNX training script in the pattern of Flax's "Scale up on multiple devices" guide,
traced on 8 CPU devices with a ("data", "model") mesh: the model made under ``nnx.jit``, an
``nnx.Optimizer``, a step function not named ``train_step`` and an evaluation every
``EVAL_EVERY`` steps. The report leads with the step; its data-parallel gradient all-reduce is a
gradient reduction over "data" whose bytes are the parameters' on one device.

The model: h[B_data, F_model] = relu(x . kernel[D, F_model] + bias); y[B_data, 1] = h .
kernel[F_model, 1] + bias (a one-output head, as a regression's).
"""
from __future__ import annotations

import json
import re

import jax.numpy as jnp
import numpy as np
import pytest

from harness import schema
from harness.analysis.programs import STEP_EXECUTIONS
from harness.runs.pipeline import analyze_trace

nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")

B, D, F, STEPS, EVAL_EVERY = 32, 64, 128, 6, 3
MESH = {"data": 4, "model": 2}
FLOAT32 = 4  # bytes


def _script(out):
    """Run the script under the profiler; the parameters' bytes on one device, after it."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh(tuple(MESH.values()), tuple(MESH), axis_types=(AxisType.Auto,) * 2)
    data = NamedSharding(mesh, P("data", None))
    init = nnx.initializers.lecun_normal()

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(D, F, kernel_init=nnx.with_partitioning(init, (None, "model")),
                                     rngs=rngs)
            self.out = nnx.Linear(F, 1, kernel_init=nnx.with_partitioning(init, ("model", None)),
                                  rngs=rngs)

        def __call__(self, x):
            return self.out(jax.nn.relu(self.hidden(x)))

    @nnx.jit
    def create_model():
        model = MLP(nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
        return model

    @nnx.jit
    def fit_batch(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    @nnx.jit
    def eval_step(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    rng = np.random.default_rng(0)
    with jax.profiler.trace(str(out)), jax.set_mesh(mesh):
        model = create_model()
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        for step in range(STEPS):
            x = jax.device_put(rng.standard_normal((B, D), np.float32), data)
            y = jax.device_put(rng.standard_normal((B, 1), np.float32), data)
            loss = fit_batch(model, optimizer, x, y)
            if step % EVAL_EVERY == 0:
                eval_step(model, x, y).block_until_ready()
        loss.block_until_ready()
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    return sum(leaf.addressable_shards[0].data.nbytes for leaf in leaves)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("nnx") / "trace"
    param_bytes = _script(out)
    return analyze_trace(out, chip="cpu", mesh=MESH), param_bytes


def test_the_report_leads_with_the_step(profiled):
    run, _ = profiled
    p = run.programs
    steps = p[(p[schema.PROGRAM] == "jit_fit_batch") & (p[schema.EXECUTIONS] >= STEP_EXECUTIONS)]
    assert len(steps) == 1  # the step (a first call may compile it once more, for one step)
    step = str(steps[schema.PROGRAM_ID].iloc[0])
    assert (run.meta[schema.PROGRAM], run.meta[schema.PROGRAM_ID]) == ("jit_fit_batch", step)
    assert set(zip(run.ops[schema.PROGRAM], run.ops[schema.PROGRAM_ID].astype(str))) == {
        ("jit_fit_batch", step)}
    assert {"jit_create_model", "jit_eval_step"} <= set(p[schema.PROGRAM])
    if (p[schema.PROGRAM] == "jit_fit_batch").sum() > 1:  # compiled again: it says what differs
        assert any(n.startswith("jit_fit_batch compiled again") and "parameter" in n
                   for n in run.notes)


def test_the_gradient_all_reduce_is_a_gradient_reduction_over_data(profiled):
    run, param_bytes = profiled
    c = run.collectives
    (g,) = c[c[schema.REASON] == "gradient reduction"].to_dict("records")
    assert g[schema.MESH_AXES] == "data"
    # every parameter's gradient on one device, and the f32 loss XLA's combiner adds to it
    assert g[schema.DEVICE_BYTES] == param_bytes + FLOAT32
    assert g[schema.WHY].startswith("the weight gradients of model.")
    assert "reduce-scatter the gradients" in g[schema.FIX]
    # the head's forward partial sums over "model": its kernel's one non-contracting dimension
    # has size 1, so no fix shards it
    (head,) = c[c[schema.REASON] == "case 3: partial sums"].to_dict("records")
    assert head[schema.MESH_AXES] == "model" and head[schema.DEVICE_BYTES] == B // 4 * FLOAT32
    assert "non-contracting" not in head[schema.FIX]


# Issue 58 item 4: nnx.jit passes each module and optimizer as a list of its arrays, which JAX
# names ``model.states[0][k]``; ``harness.analyze`` and a recompiled program's note name them
# by their NNX paths. A 2-layer MLP trained data-parallel over the 8 CPU devices; D_DP != F_DP
# sets the two kernels' shapes apart.
DP, D_DP, F_DP = 8, 8, 32
GRADIENTS = re.compile(r"the weight gradients of (.*?): ")


class DpMLP(nnx.Module):
    def __init__(self, rngs):
        self.linear1 = nnx.Linear(D_DP, F_DP, use_bias=False, rngs=rngs)
        self.linear2 = nnx.Linear(F_DP, D_DP, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.linear2(nnx.relu(self.linear1(x)))


@nnx.jit
def dp_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def _weights(model) -> set[str]:
    """``model.a.b`` for each parameter, from ``nnx.state``'s flat paths (not the harness)."""
    return {"model" + "".join(f".{p}" for p in path)
            for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _dp_batch(mesh, rows: int = 2 * DP):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    batch = NamedSharding(mesh, P("data", None))
    rng = np.random.default_rng(0)
    return (jax.device_put(rng.standard_normal((rows, D_DP), np.float32), batch),
            jax.device_put(rng.standard_normal((rows, D_DP), np.float32), batch))


def test_analyze_names_an_nnx_steps_weights_by_their_nnx_paths(tmp_path):
    import jax

    import harness
    from harness import report

    mesh = jax.make_mesh((DP,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    model = DpMLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = _dp_batch(mesh)
    run = harness.analyze(dp_step, model, optimizer, x, y, steps=1, warmup=1, chip="h100",
                          out_dir=tmp_path)
    weights = _weights(model)
    assert weights == {"model.linear1.kernel", "model.linear2.kernel"}
    c = run.collectives
    found = {w for why in c[schema.WHY] if (m := GRADIENTS.search(why))
             for w in m.group(1).split(", ")}
    assert found == weights  # the data-parallel gradient all-reduce sums both kernels
    assert "states[" not in report.render(run, "text", top=20)
    assert "states[" not in c.to_json()


@pytest.fixture
def watched():
    """A ``NnxPaths`` watching this process's flax (as ``harness profile``'s child does), its
    wrapping undone after the test."""
    from flax.nnx.transforms import compilation

    from harness.capture.nnx_paths import NnxPaths

    saved = compilation.JitWrapped.__call__, compilation.JitFn.__call__
    paths = NnxPaths()
    paths.watch(nnx)
    yield paths
    compilation.JitWrapped.__call__, compilation.JitFn.__call__ = saved


def test_a_recompiled_nnx_steps_note_names_the_changed_weight_by_its_path(tmp_path, watched):
    """The step runs STEPS times on replicated weights, then once with the first layer's
    kernel split over "data": that compilation's note names the kernel, as the meta the
    script's capture records (``schema.ARGUMENT_PATHS``) maps JAX's ``model.states[0][0]``."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from harness.capture.profiler import CAPTURE_FILE

    mesh = jax.make_mesh((DP,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    model = DpMLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = _dp_batch(mesh)
    out = tmp_path / "trace"
    with jax.profiler.trace(str(out)):
        for _ in range(STEPS):
            dp_step(model, optimizer, x, y).block_until_ready()
        kernel = model.linear1.kernel
        kernel.set_value(jax.device_put(kernel.get_value(), NamedSharding(mesh, P(None, "data"))))
        dp_step(model, optimizer, x, y).block_until_ready()
    recorded = watched.snapshot()
    # JAX's name of the kernel, which the note would read without the record
    assert recorded["jit_dp_step"]["model.states[0][0]"] == "model.linear1.kernel"
    (out / CAPTURE_FILE).write_text(json.dumps({"meta": {schema.ARGUMENT_PATHS: recorded}}))
    run = analyze_trace(out, chip="h100", mesh={"data": DP})
    notes = [n for n in run.notes if n.startswith("jit_dp_step compiled again")]
    # (a first call may compile the step once more, its parameters alike: a note of its own)
    assert any("parameter 0 'model.linear1.kernel': replicated -> P(None, 'data')" in n
               for n in notes), notes
    assert "states[" not in " ".join(run.notes)
