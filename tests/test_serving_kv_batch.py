"""The batch-sharded KV cache (inference.md, reference §7.4: KV[2, B_Z, S, K_Y, H], heads K-way,
the batch over Z = Y/K, two AllToAlls a layer): the same numbers as the head-sharded cache, and
its AllToAll bytes from the shapes."""
import math

import numpy as np
import pytest
from kv_caches import heads, random_cache

import workloads
from harness.hlo import executed, parse_module
from workloads.base import WorkloadError
from workloads.llama import serve
from workloads.mesh import make_mesh

POS = 5  # the decode slot: attends over slots [0, 5]


def _decode(parallelism: str, mesh: str, **sets):
    cfg = workloads.make_config("llama_decode", "tiny", {"parallelism": parallelism,
                                                         "dtype": "float32", "pos": str(POS),
                                                         **sets})
    fn, (params, cache, tok, pos) = serve.build_decode(cfg, make_mesh(mesh))
    return cfg, fn, (params, cache, tok, pos)


@pytest.mark.parametrize("mesh, sets", [("1x8", {}), ("2x2x2", {"K": "2"})])
def test_decode_equals_head_sharded(mesh, sets):
    """The batch layout moves the queries, never the numbers: logits and the written cache
    match the head-sharded (``dp_tp``) layout's on the same params, cache and tokens."""
    got = {}
    for par in ("dp_tp", "dp_tp_kv_batch"):
        cfg, fn, (params, cache, tok, pos) = _decode(par, mesh, **sets)
        logits, out = fn(params, random_cache(cache, cfg.K), tok, pos)
        got[par] = np.asarray(logits), {k: heads(np.asarray(v), cfg.K) for k, v in out.items()}
    np.testing.assert_allclose(got["dp_tp_kv_batch"][0], got["dp_tp"][0], rtol=1e-5, atol=1e-5)
    for k, v in got["dp_tp"][1].items():
        np.testing.assert_allclose(got["dp_tp_kv_batch"][1][k], v, rtol=1e-6, atol=1e-6)


def test_prefill_equals_head_sharded():
    got = {}
    for par in ("dp_tp", "dp_tp_kv_batch"):
        cfg = workloads.make_config("llama_prefill", "tiny", {"parallelism": par,
                                                              "dtype": "float32"})
        fn, args = serve.build_prefill(cfg, make_mesh("1x8"))
        logits, cache = fn(*args)
        got[par] = np.asarray(logits), heads(np.asarray(cache["k_LBKSH"]), cfg.K)
    np.testing.assert_allclose(got["dp_tp_kv_batch"][0], got["dp_tp"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dp_tp_kv_batch"][1], got["dp_tp"][1], rtol=1e-6, atol=1e-6)


def _compiled(parallelism: str):
    cfg, fn, args = _decode(parallelism, "1x8", scan_layers="false")
    return cfg, parse_module(fn.lower(*args).compile().as_text())


def _all_to_alls(parallelism: str):
    cfg, module = _compiled(parallelism)
    return cfg, [(i, n) for i, n in executed(module) if i.opcode.startswith("all-to-all")]


def test_all_to_all_bytes_from_shapes():
    """On 1x8 (X = 1, Y = 8) with K = 4: Z = Y/K = 2. Each layer moves the queries to the batch
    split and the outputs back: two AllToAlls a layer, each of one device's [B/X, 1, N/Y, H]
    block in f32 (4 bytes), exchanged within groups of Z devices."""
    cfg, a2a = _all_to_alls("dp_tp_kv_batch")
    X, Y = 1, 8
    Z = Y // cfg.K
    assert sum(n for _, n in a2a) == 2 * cfg.L
    block = cfg.B // X * 1 * (cfg.N // Y) * cfg.H * 4
    assert block == 8 * 1 * 1 * 8 * 4
    for instr, _ in a2a:
        assert sum(s.nbytes for s in instr.operand_leaves) == block
        groups = instr.attrs["replica_groups"]
        assert groups.group_size == Z


def test_the_caches_all_to_alls_are_not_an_experts_dispatch():
    """The queries' AllToAll feeds attention's batched matmuls, whose batch dims are the batch
    and the heads (two or more), not an expert's one: explain does not call it a dispatch."""
    from harness.explain.dataflow import expert_role

    cfg, module = _compiled("dp_tp_kv_batch")
    roles = [expert_role(i, module) for i, _ in executed(module)
             if i.opcode.startswith("all-to-all")]
    assert len(roles) == 2 * cfg.L and set(roles) == {""}


def test_head_sharded_has_no_all_to_all():
    assert _all_to_alls("dp_tp")[1] == []


def test_an_unknown_layout_names_the_built_ones():
    # both KV layouts are built (the sequence-sharded one: tests/test_serving_kv_seq.py)
    with pytest.raises(WorkloadError, match="dp_tp_kv_batch, dp_tp_kv_seq") as e:
        workloads.make_config("llama_decode", "tiny", {"parallelism": "dp_tp_kv_ring"})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("shape, model, K, want", [
    ({"X": 1, "Y": 8}, ("Y",), 4, ({"X": 1, "Y": 4, "Y_z": 2}, ("Y",), ("Y_z",))),
    ({"X": 2, "Y": 2, "Z": 2}, ("Y", "Z"), 2, ({"X": 2, "Y": 2, "Z": 2}, ("Y",), ("Z",))),
    ({"X": 1, "Y": 2, "Z": 4}, ("Y", "Z"), 4,
     ({"X": 1, "Y": 2, "Z": 2, "Z_z": 2}, ("Y", "Z"), ("Z_z",))),
])
def test_batch_kv_axes_cut_the_model_axes_at_K(shape, model, K, want):
    """Heads over the leading model axes until their sizes multiply to K, the batch over the
    rest (Z = Y/K: 8/4, 4/2, 8/4)."""
    from predictions.serving_layouts import batch_kv_axes

    got = batch_kv_axes(shape, model, K)
    assert got == want
    Z = math.prod(got[0][a] for a in got[2])
    assert Z == math.prod(shape[a] for a in model) // K
    assert math.prod(got[0][a] for a in got[1]) == K


def test_batch_kv_axes_refuse_a_cut_inside_no_axis():
    from predictions.serving_layouts import batch_kv_axes

    with pytest.raises(ValueError, match="K=4 KV heads do not split the model axes Y=6"):
        batch_kv_axes({"X": 1, "Y": 6}, ("Y",), 4)


# The memory model's KV cache a device (workloads.llama.memory.serve_bytes), from arithmetic:
# 2·L·B·S·K·H·bytes over the devices the layout splits it over (reference §7.4). tiny: L=2,
# B=8, S=32, K=4, H=8, bf16: 65536 bytes in all; 70b: L=80, B=32, S=8192, K=8, H=128: 85.9e9.
TINY_CACHE = 2 * 2 * 8 * 32 * 4 * 8 * 2
CACHE_70B = 2 * 80 * 32 * 8192 * 8 * 128 * 2
KV_LAYOUTS = ("dp_tp", "dp_tp_kv_batch", "dp_tp_kv_seq")


@pytest.mark.parametrize("preset, mesh, want", [
    # 1x8, K = 4 < Y = 8: dp_tp splits the heads K-way and replicates them beyond (each of the
    # Y devices caches its own head, stored twice over the 8: 1/K = /4); the KV layouts put
    # heads 4-way and the batch (the sequence) over Z = 2: /8
    ("tiny", "1x8", (TINY_CACHE / 4, TINY_CACHE / 8, TINY_CACHE / 8)),
    # K = 8 = Y: heads 8-way in every layout, Z = 1
    ("70b", "1x8", (CACHE_70B / 8,) * 3),
    # Y = 16 > K = 8: heads 8-way and replicated beyond under dp_tp, heads 8-way x Z = 2
    # under the KV layouts
    ("70b", "1x16", (CACHE_70B / 8, CACHE_70B / 16, CACHE_70B / 16)),
    # X = 2 splits the batch in every layout, heads 8-way over Y = 8
    ("70b", "2x8", (CACHE_70B / 16,) * 3),
])
def test_the_memory_models_cache_follows_the_kv_layout(preset, mesh, want):
    from workloads.llama import memory
    from workloads.mesh import abstract_mesh

    got = [memory.serve_bytes(workloads.make_config("llama_decode", preset, {"parallelism": p}),
                              abstract_mesh(mesh, ("X", "Y")))["kv_cache"] for p in KV_LAYOUTS]
    assert got == list(want)


@pytest.mark.parametrize("parallelism", KV_LAYOUTS)
def test_the_compiled_caches_argument_bytes_are_the_memory_models(parallelism):
    """XLA's argument bytes a device (``memory_analysis`` of the decode step compiled for 8 CPU
    devices), less the params', tokens' and slot's shards, are the cache the model counts."""
    import jax

    from workloads.llama import memory

    cfg = workloads.make_config("llama_decode", "tiny", {"parallelism": parallelism})
    mesh = make_mesh("1x8")
    fn, (params, cache, tok, pos) = serve.build_decode(cfg, mesh, abstract=True)
    args = fn.lower(params, cache, tok, pos).compile().memory_analysis().argument_size_in_bytes
    others = sum(math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
                 for x in jax.tree.leaves((params, tok, pos)))
    want = TINY_CACHE / (4 if parallelism == "dp_tp" else 8)   # 1/K, else 1/(K·Z)
    assert args - others == want == memory.serve_bytes(cfg, mesh)["kv_cache"]
