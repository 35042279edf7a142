"""docs/explain.md's worked example: one matmul whose contracting dimension is sharded over X
on a 4x2 mesh of CPU devices, traced with JAX's own profiler (no harness involved).

    python docs/examples/explain_matmul.py results/explain    # writes a trace under it
    harness explain results/explain --mesh X=4,Y=2
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
x = jax.device_put(jnp.ones((256, 512)), NamedSharding(mesh, P(None, "X")))
w = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("X", None)))
f = jax.jit(lambda x, w: x @ w)  # contracts over the dimension both operands shard over X

f(x, w).block_until_ready()  # compiled outside the trace
with jax.profiler.trace(sys.argv[1]):
    for _ in range(5):
        f(x, w).block_until_ready()
