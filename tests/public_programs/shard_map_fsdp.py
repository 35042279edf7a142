"""FSDP written with ``shard_map`` as JAX's shard_map tutorial writes it ("Fully-sharded data
parallelism"), scaled down: every (W, b) stored split over the 'batch' axis of 8 devices,
gathered whole just before its layer by a ``custom_vjp`` whose backward pass is a
``psum_scatter`` (the gradient summed and scattered back to the shards), the loss ``pmean``-ed
over 'batch', and SGD on the shards.

Run alone (``python shard_map_fsdp.py``) or under ``harness profile``. Shapes are module
constants so tests derive bytes from them: layer sizes LAYERS, batch B."""
from functools import partial

import jax

if __name__ == "__main__":  # run alone: 8 CPU devices (a test imports it on its own 8)
    jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYERS = [128, 256, 256, 128]
B = 256
STEPS = 4
LR = 1e-3
mesh = jax.make_mesh((8,), ("batch",))


def init_layer(key, n_in, n_out):
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, (n_in, n_out)) / jnp.sqrt(n_in), jax.random.normal(k2, (n_out,))


def init(key, layer_sizes, batch_size):
    key, *keys = jax.random.split(key, len(layer_sizes))
    params = list(map(init_layer, keys, layer_sizes[:-1], layer_sizes[1:]))
    k1, k2 = jax.random.split(key)
    return params, (jax.random.normal(k1, (batch_size, layer_sizes[0])),
                    jax.random.normal(k2, (batch_size, layer_sizes[-1])))


@jax.custom_vjp
def gather_params(param):
    return jax.lax.all_gather(param, "batch", tiled=True)


def gather_params_fwd(param):
    return gather_params(param), None


def gather_params_bwd(_, g):
    return (jax.lax.psum_scatter(g, "batch", tiled=True),)


gather_params.defvjp(gather_params_fwd, gather_params_bwd)


def predict_fsdp(params_frag, inputs):
    for W_frag, b_frag in params_frag:
        W = gather_params(W_frag)
        b = gather_params(b_frag)
        outputs = jnp.dot(inputs, W) + b
        inputs = jax.nn.relu(outputs)
    return outputs


@partial(jax.shard_map, mesh=mesh, in_specs=(P("batch"), P("batch")), out_specs=P())
def loss_fsdp(local_params, local_batch):
    inputs, targets = local_batch
    predictions = predict_fsdp(local_params, inputs)
    local_loss = jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))
    return jax.lax.pmean(local_loss, "batch")


@jax.jit
def train_step(params, batch):
    grads = jax.grad(loss_fsdp)(params, batch)
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


if __name__ == "__main__":
    params, batch = init(jax.random.key(0), LAYERS, B)
    params = jax.device_put(params, NamedSharding(mesh, P("batch")))
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch")))
    for _ in range(STEPS):
        params = train_step(params, batch)
    print("loss", float(loss_fsdp(params, batch)))
