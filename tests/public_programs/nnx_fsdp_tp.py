"""A Flax NNX MLP trained under ``jax.set_mesh`` with its parameters sharded two ways, in the
pattern of Flax's "Scale up on multiple devices" guide taken to FSDP + tensor parallelism (book
§6.1): each kernel split over 'data' on D (stored sharded, gathered for its matmul) and over
'model' on F (Megatron: W_in[D_data, F_model], W_out[F_model, D_data]); the batch over 'data';
AdamW through ``nnx.Optimizer``; the model made under ``nnx.jit`` with its partition specs.

Run alone (``python nnx_fsdp_tp.py``) or under ``harness profile``. Shapes are module
constants so tests derive bytes from them."""
import jax

if __name__ == "__main__":  # run alone: 8 CPU devices (a test imports it on its own 8)
    jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

B, D, F, STEPS = 64, 128, 256, 4
MESH = {"data": 4, "model": 2}


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.w_in = nnx.Linear(D, F, use_bias=False, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, ("data", "model")))
        self.w_out = nnx.Linear(F, D, use_bias=False, rngs=rngs,
                                kernel_init=nnx.with_partitioning(init, ("model", "data")))

    def __call__(self, x):
        return self.w_out(jax.nn.relu(self.w_in(x)))


@nnx.jit
def create_model():
    model = MLP(nnx.Rngs(0))
    state = nnx.state(model)
    nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    return model


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


if __name__ == "__main__":
    mesh = jax.make_mesh(tuple(MESH.values()), tuple(MESH), axis_types=(AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    with jax.set_mesh(mesh):
        model = create_model()
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
        batch = NamedSharding(mesh, P("data", None))
        x = jax.device_put(rng.standard_normal((B, D), np.float32), batch)
        y = jax.device_put(rng.standard_normal((B, D), np.float32), batch)
        for _ in range(STEPS):
            loss = train_step(model, optimizer, x, y)
        print("loss", float(loss))
