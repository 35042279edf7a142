"""A loop that puts a fresh 64 MB host array on the devices before each step: ``harness
profile`` should name the time as input or as the host's own work (python), never as dispatch
(issue 57). Arguments: the megabytes (64) and the steps (10)."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MB = int(sys.argv[1]) if len(sys.argv) > 1 else 64
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 10

sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
step = jax.jit(lambda x: jnp.tanh(x).sum())
rows = MB * 2**20 // (4 * 1024)  # float32 rows of 1024: MB megabytes
for i in range(STEPS):
    host = np.full((rows, 1024), float(i), np.float32)  # a fresh host array each step
    x = jax.device_put(host, sharding)  # put on the devices: a fresh 64 MB input each step
    step(x).block_until_ready()
