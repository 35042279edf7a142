"""Two layouts of one 4-layer MLP on a 4x2 mesh of CPU devices (docs/layouts.md).

    python docs/layouts_story.py results/story      # saves results/story/bad and .../good
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import harness

B, D, LAYERS = 256, 1024, 4
mesh = jax.make_mesh((4, 2), ("X", "Y"))


@jax.jit
def mlp(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w)  # one layer
    return x


LAYOUTS = {
    # every weight W[D_X, D] sharded on its contracting dimension (and the batch over Y)
    "bad": (P("Y", None), P("X", None)),
    # data parallel: the batch over both axes, the weights replicated
    "good": (P(("X", "Y"), None), P(None, None)),
}

for name, (x_spec, w_spec) in LAYOUTS.items():
    x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, x_spec))
    ws = [jax.device_put(jnp.full((D, D), 1e-3), NamedSharding(mesh, w_spec))
          for _ in range(LAYERS)]
    run = harness.analyze(mlp, x, ws, steps=5)
    print(name, run.save(f"{sys.argv[1]}/{name}"))
