"""The sequence-sharded KV cache (``dp_tp_kv_seq``; inference.md, reference §7.4: "shard the
cache along the sequence, AllGather Q and combine flash-style"): KV[2, B_X, S_Z, K_Y, H], the
same numbers as the head-sharded cache, each device holding S/Z slots, the combine's collectives
counted per layer from the shapes, and the program compiled ahead of time for a TPU slice."""
import collections

import numpy as np
import pytest
from kv_caches import heads, random_cache

import workloads
from harness.hlo import executed, parse_module
from predictions import serving_layouts, transformer
from workloads.llama import serve
from workloads.llama.config import book_model
from workloads.mesh import make_mesh


def _decode(parallelism: str, mesh: str, pos: int, **sets):
    cfg = workloads.make_config("llama_decode", "tiny", {"parallelism": parallelism,
                                                         "dtype": "float32", "pos": str(pos),
                                                         **sets})
    fn, args = serve.build_decode(cfg, make_mesh(mesh))
    return cfg, fn, args


def _run(parallelism, mesh, pos, **sets):
    cfg, fn, (params, cache, tok, p) = _decode(parallelism, mesh, pos, **sets)
    logits, out = fn(params, random_cache(cache, cfg.K), tok, p)
    return cfg, np.asarray(logits), out


@pytest.mark.parametrize("mesh, pos, sets", [
    ("1x8", 5, {}),                   # the new token's slot on the first of Z = 2 shards
    ("1x8", 27, {"int8_kv": "true"}),  # on the second (slots 16..31), int8 values and scales
    ("2x2x2", 17, {"K": "2"}),        # X = 2 replicas, heads over Y = 2, the sequence over Z = 2
])
def test_decode_equals_head_sharded(mesh, pos, sets):
    """The sequence layout combines partial softmaxes, never changes the numbers: logits and
    the written cache match ``dp_tp``'s on the same params, cache and tokens."""
    _, want_logits, want = _run("dp_tp", mesh, pos, **sets)
    cfg, got_logits, got = _run("dp_tp_kv_seq", mesh, pos, **sets)
    np.testing.assert_allclose(got_logits, want_logits, rtol=1e-5, atol=1e-5)
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k], np.float32),
                                   heads(v, cfg.K).astype(np.float32), rtol=1e-5, atol=1e-5)
    # each device holds S/Z slots of its batch's heads: [L, B/X, K/K, S/Z, H] with Z = Y/K
    X = int(mesh.split("x")[0])
    Z = (8 // X) // cfg.K
    shard = got["k_LBKSH"].addressable_shards[0].data.shape
    assert shard == (cfg.L, cfg.B // X, 1, cfg.S // Z, cfg.H)


def test_prefill_writes_each_slot_on_its_device():
    """Prefill's T = 16 tokens fill slots [0, 16): all on the first of Z = 2 shards of S = 32;
    the second shard stays zero, and the cache equals dp_tp's."""
    got = {}
    for par in ("dp_tp", "dp_tp_kv_seq"):
        cfg = workloads.make_config("llama_prefill", "tiny", {"parallelism": par,
                                                              "dtype": "float32"})
        fn, args = serve.build_prefill(cfg, make_mesh("1x8"))
        logits, cache = fn(*args)
        got[par] = np.asarray(logits), heads(cache["k_LBKSH"], cfg.K)
    np.testing.assert_allclose(got["dp_tp_kv_seq"][0], got["dp_tp"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dp_tp_kv_seq"][1], got["dp_tp"][1], rtol=1e-5, atol=1e-5)
    assert not got["dp_tp_kv_seq"][1][:, :, :, cfg.T:].any()


def _combine(module, Z: int):
    """(kind, bytes in, bytes out) -> count of the collectives within groups of Z."""
    out = collections.Counter()
    for instr, n in executed(module):
        groups = instr.attrs.get("replica_groups")
        if instr.opcode.startswith("all-") and groups is not None and groups.group_size == Z:
            nbytes = sum(s.nbytes for s in instr.operand_leaves)
            out[(instr.opcode, nbytes)] += n
    return out


def test_the_combines_collectives_per_layer_from_shapes():
    """On 1x8 (X = 1, Y = 8) with K = 4: Z = 2. Per layer, in groups of Z, in f32 on this host:
    the queries' AllGather (each device's [B, 1, N/Y, H] block: 8·1·1·8·4 = 256 bytes in, Z
    times that out), the maxima's AllReduce ([B, N/K]: 8·2·4 = 64 bytes) and the partials'
    AllReduce ([B, N/K, H + 1]: 8·2·9·4 = 576 bytes); nothing else within groups of Z. The
    prediction's bytes (``sequence_collectives``) are the same."""
    cfg, fn, args = _decode("dp_tp_kv_seq", "1x8", 5, scan_layers="false")
    module = parse_module(fn.lower(*args).compile().as_text())
    Z, L, B, G = 2, cfg.L, cfg.B, cfg.N // cfg.K
    assert (B, cfg.N, cfg.K, cfg.H, L) == (8, 8, 4, 8, 2)
    assert _combine(module, Z) == {("all-gather", B * 1 * (cfg.N // 8) * cfg.H * 4): L,
                                   ("all-reduce", B * G * 4): L,
                                   ("all-reduce", B * G * (cfg.H + 1) * 4): L}
    want = serving_layouts.sequence_collectives(book_model(cfg), B, act_bytes=4)
    assert want == (("all-gather", Z * 256), ("all-reduce", 64), ("all-reduce", 576))
    _, heads_fn, heads = _decode("dp_tp", "1x8", 5, scan_layers="false")
    assert _combine(parse_module(heads_fn.lower(*heads).compile().as_text()), Z) == {}


def test_the_prediction_prices_those_collectives():
    """LLaMA-3 70B (N = 64, K = 8, H = 128, L = 80) on 1x16 at B = 32: Z = 2; per layer an
    AllGather of 32·8·128·2 = 65,536 bytes and AllReduces of 32·8·4 = 1,024 and 1,024·129."""
    from predictions import collectives
    from predictions.hardware import chip_entry
    from predictions.serving import torus_axes

    M = transformer.model("llama3-70b")
    chip = chip_entry("tpu-v5e")
    p = serving_layouts.price(M, chip, "sequence", 1, 16, 32, 32768)
    g = torus_axes(chip, 2)
    per_layer = (collectives.all_gather(65536, g, chip) + collectives.all_reduce(1024, g, chip)
                 + collectives.all_reduce(1024 * 129, g, chip))
    assert p.kv_comm_s == pytest.approx(80 * per_layer)
    assert serving_layouts.price(M, chip, "sequence", 2, 8, 32, 32768).kv_comm_s == 0  # Y = K


def test_the_layout_registry_knows_it():
    from predictions import layouts
    from workloads.llama.sharding import PARALLELISMS

    kv = layouts.LAYOUTS["dp_tp_kv_seq"]
    assert (kv.axes, kv.batch, kv.model, kv.planned) == (("data", "model"), ("data",),
                                                         ("model",), False)
    assert "dp_tp_kv_seq" in PARALLELISMS
    assert serving_layouts.WORKLOAD_PARALLELISMS["dp_tp_kv_seq"] == ("dp_tp", "sequence")


@pytest.mark.libtpu
@pytest.mark.slow  # about 20 s on a 2-core host
def test_compiles_ahead_of_time_for_a_tpu_slice():
    """XLA:TPU (libtpu) takes the shard_map'd combine and the owner's masked write: on a v5e
    2x4 slice as 1x8 the same three collectives a layer within groups of Z = 2, in bf16 for the
    queries (8·1·1·8·2 = 128 bytes a device) and f32 for the combine."""
    from workloads.aot import compile_in_subprocess

    aot = compile_in_subprocess("llama_decode", "tiny", {"parallelism": "dp_tp_kv_seq",
                                                         "scan_layers": "false", "S": "256"},
                                "1x8", tpu_chip="tpu-v5e")
    got = _combine(parse_module(aot.hlo_text), 2)
    assert got == {("all-gather", 128): 2, ("all-reduce", 64): 2, ("all-reduce", 576): 2}
