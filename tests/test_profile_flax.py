"""``harness profile`` on a Flax NNX training script in the pattern of Flax's own examples (a
``nnx.Module`` whose kernels are sharded over a ("data", "model") mesh made with
``jax.sharding.Mesh``, an ``nnx.Optimizer`` with Optax, the step under ``nnx.jit`` and
``jax.set_mesh``), its step not named train_step: the collectives' axes are the script's names,
in the report and in ``harness explain`` of the stored run."""
from __future__ import annotations

import json
import re
import textwrap

import pytest
from profiling import executions, harness, report_of

from harness import schema

pytest.importorskip("flax")
pytest.importorskip("optax")

B, D, F = 8, 16, 32  # batch, model width, hidden width (the book's letters)
SCRIPT = textwrap.dedent(f"""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    from jax.experimental import mesh_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    B, D, F = {B}, {D}, {F}
    mesh = jax.sharding.Mesh(mesh_utils.create_device_mesh((2, 2)), ("data", "model"))

    class MLP(nnx.Module):
        def __init__(self, rngs):
            init = nnx.initializers.lecun_normal()
            self.w_in = nnx.Linear(D, F, use_bias=False, rngs=rngs,
                                   kernel_init=nnx.with_partitioning(init, (None, "model")))
            self.w_out = nnx.Linear(F, D, use_bias=False, rngs=rngs,
                                    kernel_init=nnx.with_partitioning(init, ("model", None)))

        def __call__(self, x):
            return self.w_out(nnx.relu(self.w_in(x)))

    @nnx.jit
    def create():
        model = MLP(nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
        return model

    with jax.set_mesh(mesh):
        model = create()
        optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    @nnx.jit
    def update(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, P("data", None)))
    y = jax.device_put(jnp.zeros((B, D)), NamedSharding(mesh, P("data", None)))
    with jax.set_mesh(mesh):
        for _ in range(5):
            update(model, optimizer, x, y).block_until_ready()
""")


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_flax_nnx_step_has_its_collectives_named_by_the_scripts_axes(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "--out", "runs",
                   "train.py")
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout[:done.stdout.rindex("run: ")])
    assert executions(report)["jit_update"] == 5
    assert report["meta"][schema.MESHES] == [
        {"axes": {"data": 2, "model": 2}, "devices": [0, 1, 2, 3]}]
    comm: dict[str, float] = {}
    for c in report["collectives"]:
        assert c[schema.COLLECTIVE] == "all-reduce" and c[schema.PROGRAM] == "jit_update"
        comm[c[schema.MESH_AXES]] = comm.get(c[schema.MESH_AXES], 0) + c[schema.DEVICE_BYTES]
    # over data: each device's gradients of both kernels (D x F/2 floats each) and the mean
    # loss; over model: w_out's partial sums of the activations, B/2 x D floats
    assert comm == {"data": 2 * D * (F // 2) * 4 + 4, "model": (B // 2) * D * 4}
    (stored,) = list((tmp_path / "runs").iterdir())
    explained = harness(tmp_path, "explain", str(stored), "--json", "explained.json")
    assert explained.returncode == 0, explained.stderr[-3000:]
    rows = json.loads((tmp_path / "explained.json").read_text())
    assert sorted(r[schema.MESH_AXES] for r in rows) == ["data", "model"]
    assert "{0," not in explained.stdout


# Issue 58 item 4: nnx.jit passes each graph node as a list of its arrays, which JAX names
# ``model.states[0][k]``; under ``harness profile`` they are named by their NNX paths.
# devices (the data axis), model and hidden widths: D2 != F2 sets the two kernels' shapes apart
DP, D2, F2 = 8, 8, 32
MLP_SOURCE = textwrap.dedent("""
    class MLP(nnx.Module):
        def __init__(self, rngs, bias=False):
            self.linear1 = nnx.Linear(D, F, use_bias=bias, rngs=rngs)
            self.linear2 = nnx.Linear(F, D, use_bias=bias, rngs=rngs)

        def __call__(self, x):
            return self.linear2(nnx.relu(self.linear1(x)))
""")
DP_SCRIPT = textwrap.dedent(f"""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={DP}"
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec as P

    B, D, F = 2 * {DP}, {D2}, {F2}
""") + MLP_SOURCE + textwrap.dedent("""
    mesh = jax.sharding.Mesh(jax.devices(), ("data",))
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    @nnx.jit
    def nnx_step(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    @jax.jit
    def jax_step(params, x, y):
        def loss_fn(params):
            return jnp.mean((jnp.maximum(x @ params["w1"], 0) @ params["w2"] - y) ** 2)
        grads = jax.grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    batch = NamedSharding(mesh, P("data", None))
    x = jax.device_put(jnp.ones((B, D)), batch)
    y = jax.device_put(jnp.zeros((B, D)), batch)
    params = {"w1": jnp.ones((D, F)) / D, "w2": jnp.ones((F, D)) / F}
    for _ in range(3):
        nnx_step(model, optimizer, x, y).block_until_ready()
        params = jax.block_until_ready(jax_step(params, x, y))
""")
GRADIENTS = re.compile(r"the weight gradients of (.*?): ")


def _mlp(**kwargs):
    """The MLP of ``MLP_SOURCE``, made here (the test's own process)."""
    from flax import nnx

    scope = {"nnx": nnx, "D": D2, "F": F2}
    exec(MLP_SOURCE, scope)
    return scope["MLP"](nnx.Rngs(0), **kwargs)


def _named(prefix: str, node, skip=()) -> dict[str, tuple]:
    """``prefix.a.b`` -> shape of each array of an NNX node (``nnx.state``'s flat paths),
    the variables in ``skip`` left out."""
    from flax import nnx

    return {prefix + "".join(f".{p}" for p in path): v.get_value().shape
            for path, v in nnx.to_flat_state(nnx.state(node)) if not any(v is s for s in skip)}


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_profiled_nnx_step_names_its_weights_by_their_nnx_paths(tmp_path):
    (tmp_path / "train.py").write_text(DP_SCRIPT)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "--program", "all",
                   "--out", "runs", "train.py")
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout[:done.stdout.rindex("run: ")])
    weights = set(_named("model", _mlp()))  # nnx.state's paths of the script's model
    assert weights == {"model.linear1.kernel", "model.linear2.kernel"}
    (stored,) = list((tmp_path / "runs").iterdir())
    explained = harness(tmp_path, "explain", str(stored), "--program", "all",
                        "--json", "explained.json")
    assert explained.returncode == 0, explained.stderr[-3000:]
    for rows in (report["collectives"], json.loads((tmp_path / "explained.json").read_text())):
        found: dict[str, set[str]] = {}
        for r in rows:  # each program's data-parallel gradient all-reduce
            m = GRADIENTS.search(r[schema.WHY])
            found.setdefault(r[schema.PROGRAM], set()).update(m.group(1).split(", ") if m else ())
        assert found == {"jit_nnx_step": weights, "jit_jax_step": {"params['w1']",
                                                                   "params['w2']"}}
        assert "states[" not in json.dumps(rows)
    assert "states[" not in explained.stdout and "model.linear1.kernel" in explained.stdout


@pytest.fixture
def nnx_paths():
    """A ``NnxPaths`` watching this process's flax, its wrapping undone after the test."""
    from flax import nnx
    from flax.nnx.transforms import compilation

    from harness.capture.nnx_paths import NnxPaths

    saved = compilation.JitWrapped.__call__, compilation.JitFn.__call__
    paths = NnxPaths()
    paths.watch(nnx)
    assert compilation.JitWrapped.__call__ is not saved[0]  # flax 0.12's internals found
    yield paths
    compilation.JitWrapped.__call__, compilation.JitFn.__call__ = saved


def test_nnx_jit_parameters_are_named_by_paths_that_fit_their_shapes(nnx_paths):
    """A variable two arguments share is passed once, with the first (``first``, the model's
    second layer): the model's state is the rest, its indices shifted; each name's array has
    the shape the compiled program's parameter of that name has."""
    import jax.numpy as jnp
    from flax import nnx

    from harness.hlo import parse_module
    from harness.hlo.signature import parameters

    model = _mlp(bias=True)
    first = model.linear2

    @nnx.jit
    def f(first, model, *, x):
        return model(x).sum() + first(jnp.ones((1, F2))).sum()

    x = jnp.ones((2, D2))
    got = f(first, model, x=x)
    assert jnp.allclose(got, model(x).sum() + first(jnp.ones((1, F2))).sum())  # as unwatched
    named = nnx_paths.snapshot()["jit_f"]
    expected = {**_named("first", first),
                **_named("model", model, skip=[v for _, v in nnx.to_flat_state(nnx.state(first))])}
    assert sorted(named.values()) == sorted(expected)  # 2 of the first's, 2 of the model's
    compiled = parse_module(f.lower(first, model, x=x).compile().as_text())
    shown = {p.name: p.dims for p in parameters(compiled) if "states[" in p.name}
    assert shown.keys() == named.keys()
    assert {named[k]: dims for k, dims in shown.items()} == expected


def test_a_flax_without_the_known_internals_is_left_as_it_is():
    from types import SimpleNamespace

    from harness.capture.nnx_paths import NnxPaths

    paths = NnxPaths()
    paths.watch(SimpleNamespace())  # no graph, no Variable: nothing wrapped, no error
    assert paths.snapshot() == {}
