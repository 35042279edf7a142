"""Random KV caches that every serving layout reads the same: the same K heads, stored once per
model device that shares them where a layout repeats them (``dp_tp`` past K-way: [L, B, K·r, S,
H], ``workloads.llama.kv_cache.stored``), and the K heads read back from such a cache."""
from __future__ import annotations

import numpy as np


def random_cache(cache: dict, K: int) -> dict:
    """``cache``'s arrays (placed) replaced by the same random K heads in every layout, each
    stored r = heads / K times."""
    import jax
    rng = np.random.default_rng(0)

    def one(v):
        r = v.shape[2] // K
        x = rng.standard_normal((*v.shape[:2], K, *v.shape[3:])).astype(v.dtype)
        return jax.device_put(np.repeat(x, r, axis=2), v.sharding)
    return {k: one(v) for k, v in cache.items()}


def heads(x, K: int) -> np.ndarray:
    """A cache's K heads: one of each head's r stored copies, which must agree."""
    x = np.asarray(x)
    r = x.shape[2] // K
    copies = [x[:, :, i::r] for i in range(r)]
    for c in copies[1:]:
        np.testing.assert_array_equal(c, copies[0])
    return copies[0]
