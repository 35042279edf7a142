"""A training loop that sleeps 20 ms on the host between steps (a stand-in for data loading or
logging in Python): ``harness profile`` should name the 20 ms as the host's own work between
steps, python, not as dispatch (issue 57). Arguments: the sleep in seconds (0.020), the steps
(12), and a file to write, per step after the first, the seconds from the last step's outputs
ready to this step's call by the host's clock (a loaded host oversleeps); and a name to sleep
inside a ``jax.profiler.TraceAnnotation`` of ("": none), which should name the python wait."""
import contextlib
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

SLEEP_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.020
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 12
TOOK = sys.argv[3] if len(sys.argv) > 3 else ""
NAME = sys.argv[4] if len(sys.argv) > 4 else ""

sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() + x.sum())
x = jax.device_put(np.ones((256, 64), np.float32), sharding)
took, done = [], None
for i in range(STEPS):
    with jax.profiler.TraceAnnotation(NAME) if NAME else contextlib.nullcontext():
        time.sleep(SLEEP_S)  # the host's own work between steps
    if done is not None:
        took.append(time.perf_counter() - done)
    step(x).block_until_ready()
    done = time.perf_counter()
if TOOK:
    with open(TOOK, "w") as f:
        json.dump(took, f)
