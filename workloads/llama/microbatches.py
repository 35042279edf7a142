"""The microbatch loop and ZeRO-1, shared by ``llama_train``'s pipeline and its gradient
accumulation (`training.md`: ZeRO-1/2/3 shard optimizer state / + gradients / + weights at the
same communication cost, reference §6.1; `gpus.md`: a pipeline pairs with ZeRO-1).

Microbatch m of a batch of B rows is rows m, m + M, m + 2M, ...: a reshape [B] -> [B/M, M]
and a swap, so a batch split over devices in blocks stays where it is (each device's block
holds whole rows of every microbatch).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.llama.sharding import Sharder
from workloads.mesh import axis_size


def microbatch(x, M: int):
    """[B, ...] -> [M, B/M, ...]: microbatch m is rows m, m + M, ... (each device's rows stay)."""
    B = x.shape[0]
    return jnp.swapaxes(x.reshape(B // M, M, *x.shape[1:]), 0, 1)


def unmicrobatch(x):
    """The inverse of ``microbatch``."""
    M, b = x.shape[:2]
    return jnp.swapaxes(x, 0, 1).reshape(M * b, *x.shape[2:])


def accumulate(grads_of, M: int):
    """Gradient accumulation: ``grads_of(params, inputs, targets, *rest) -> (loss, grads)``
    over M microbatches in a loop, the loss and gradients their mean (fp32 sums)."""
    def run(params, inputs_BT, targets_BT, *rest):
        def one(acc, xs):
            value, g = grads_of(params, *xs, *rest)
            total, summed = acc
            return (total + value.astype(jnp.float32),
                    jax.tree.map(lambda a, b: a + b.astype(jnp.float32), summed, g)), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        (total, summed), _ = jax.lax.scan(one, (jnp.zeros((), jnp.float32), zeros),
                                          (microbatch(inputs_BT, M), microbatch(targets_BT, M)))
        grads = jax.tree.map(lambda g, p: (g / M).astype(p.dtype), summed, params)
        return total / M, grads
    return run


def zero1_specs(specs, shapes, sh: Sharder):
    """ZeRO-1: each AdamW moment's spec with the axes that split the batch added on its first
    unsplit dim they divide (the weights' specs unchanged: whole per stage; `training.md`,
    ZeRO-1/2/3, reference §6.1)."""
    batch = tuple(a for a in sh.layout.batch)

    def one(spec, shape):
        used = {a for e in spec if e for a in ((e,) if isinstance(e, str) else e)}
        free = tuple(a for a in batch if a not in used)
        n = axis_size(sh.mesh, free) if free else 1
        entries = list(spec) + [None] * (len(shape.shape) - len(spec))
        for i, (e, dim) in enumerate(zip(entries, shape.shape)):
            if free and e is None and dim % n == 0:
                entries[i] = free[0] if len(free) == 1 else free
                return P(*entries)
        return spec

    return jax.tree.map(one, specs, shapes, is_leaf=lambda x: isinstance(x, P))
