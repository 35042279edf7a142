"""The neural-net training of JAX's "Distributed arrays and automatic parallelization"
tutorial, scaled down: an MLP of (W, b) layers trained by SGD, first data-parallel (the batch
over 8 devices, the parameters replicated), then data- and model-parallel on a 4x2 mesh
('batch', 'model': W2 split on its columns, W3 on its rows, as the tutorial shards them).

Run alone (``python sharded_mlp_training.py``) or under ``harness profile``. Shapes are module
constants so tests derive bytes from them: layer sizes LAYERS, batch B."""
import jax

if __name__ == "__main__":  # run alone: 8 CPU devices (a test imports it on its own 8)
    jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYERS = [64, 256, 256, 256, 16]
B = 256
STEPS = 4
LR = 1e-3


def init_layer(key, n_in, n_out):
    k1, k2 = jax.random.split(key)
    W = jax.random.normal(k1, (n_in, n_out)) / jnp.sqrt(n_in)
    b = jax.random.normal(k2, (n_out,))
    return W, b


def init(key, layer_sizes, batch_size):
    key, *keys = jax.random.split(key, len(layer_sizes))
    params = list(map(init_layer, keys, layer_sizes[:-1], layer_sizes[1:]))
    key, *keys = jax.random.split(key, 3)
    inputs = jax.random.normal(keys[0], (batch_size, layer_sizes[0]))
    targets = jax.random.normal(keys[1], (batch_size, layer_sizes[-1]))
    return params, (inputs, targets)


def predict(params, inputs):
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.maximum(outputs, 0)
    return outputs


def loss(params, batch):
    inputs, targets = batch
    predictions = predict(params, inputs)
    return jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))


@jax.jit
def train_step(params, batch):
    grads = jax.grad(loss)(params, batch)
    return [(W - LR * dW, b - LR * db) for (W, b), (dW, db) in zip(params, grads)]


def data_parallel(params, batch):
    """The batch split over all 8 devices, the parameters replicated."""
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch")))
    params = jax.device_put(params, NamedSharding(mesh, P()))
    return params, batch


def model_parallel(params, batch):
    """The batch over 'batch' (4), W2 and b2 over 'model' (2) on their columns, W3 on its
    rows, the rest replicated."""
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("batch", "model"))
    replicated = NamedSharding(mesh, P())
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch")))
    (W1, b1), (W2, b2), (W3, b3), (W4, b4) = params
    W1, b1 = jax.device_put((W1, b1), replicated)
    W2 = jax.device_put(W2, NamedSharding(mesh, P(None, "model")))
    b2 = jax.device_put(b2, NamedSharding(mesh, P("model")))
    W3 = jax.device_put(W3, NamedSharding(mesh, P("model", None)))
    b3, W4, b4 = jax.device_put((b3, W4, b4), replicated)
    return [(W1, b1), (W2, b2), (W3, b3), (W4, b4)], batch


def train(params, batch):
    for _ in range(STEPS):
        params = train_step(params, batch)
    return jax.block_until_ready(params)


if __name__ == "__main__":
    params, batch = init(jax.random.key(0), LAYERS, B)
    for layout in (data_parallel, model_parallel):
        placed, placed_batch = layout(params, batch)
        print(layout.__name__, "loss", float(loss(train(placed, placed_batch), placed_batch)))
