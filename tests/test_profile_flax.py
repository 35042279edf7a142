"""``harness profile`` on a Flax NNX training script in the pattern of Flax's own examples (a
``nnx.Module`` whose kernels are sharded over a ("data", "model") mesh made with
``jax.sharding.Mesh``, an ``nnx.Optimizer`` with Optax, the step under ``nnx.jit`` and
``jax.set_mesh``), its step not named train_step: the collectives' axes are the script's names,
in the report and in ``harness explain`` of the stored run."""
from __future__ import annotations

import json
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
