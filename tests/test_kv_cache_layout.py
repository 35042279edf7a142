"""The decode step's cache in the compiler's layout (``--set cache_layout``,
``workloads.llama.kv_cache.CACHE_LAYOUTS``): on 8 CPU devices the step jitted again with the
formats the compiler picked serves the same logits step after step, its donated cache coming back
in those formats; for a v5e slice XLA:TPU keeps the cache where the step reads it, where a
row-major cache is copied whole in and out of every step; prefill and the generation loop refuse
the option in one line."""
import numpy as np
import pytest

import workloads
from workloads.base import WorkloadError
from workloads.llama import generate, serve
from workloads.mesh import make_mesh


def _two_steps(layout: str):
    """Logits of two chained decode steps on 4x2 (f32), the second on the cache the first
    returned, and that cache's format against what the compiled step takes."""
    cfg = workloads.make_config("llama_decode", "tiny", {"cache_layout": layout,
                                                         "dtype": "float32"})
    fn, (params, cache, tok, pos) = serve.build_decode(cfg, make_mesh("4x2", ("X", "Y")))
    taken = fn.lower(params, cache, tok, pos).compile().input_formats[0][1]
    _, cache = fn(params, cache, tok, pos)
    assert {n: a.format for n, a in cache.items()} == dict(taken)
    logits, _ = fn(params, cache, tok, pos)
    return np.asarray(logits)


def test_the_compilers_layout_serves_the_same_logits_step_after_step():
    np.testing.assert_array_equal(_two_steps("compiler"), _two_steps("default"))


@pytest.mark.parametrize("name, build", [
    ("llama_prefill", serve.build_prefill),
    ("llama_generate", lambda cfg, mesh: generate.programs(cfg, mesh)),
])
def test_prefill_and_the_loop_keep_their_cache_row_major(name, build):
    cfg = workloads.make_config(name, "tiny", {"cache_layout": "compiler"})
    with pytest.raises(WorkloadError, match=f"is llama_decode's .*; {name} keeps its cache "
                                            "row-major: leave it unset"):
        build(cfg, None)


@pytest.mark.slow  # two XLA:TPU compiles of 8B-wide layers, ~30 s
@pytest.mark.libtpu
def test_xla_tpu_keeps_the_cache_where_the_step_reads_it():
    """LLaMA-3 8B's layers (2 of them, S = 1024) on v5e 4x2, B = 32: each chip holds B/X = 8
    sequences of K/Y = 4 heads, K and V each 2 x 8 x 4 x 1024 x 128 x 2 B = 16.8 MB. Row-major,
    XLA:TPU copies both whole into its own layout (the batch in the sublanes) for the step: its
    temporaries hold at least the two; in the compiler's layout they are not copied (the step's
    temporaries under a tenth of one)."""
    from workloads.tpu import topology_mesh

    cache_bytes = 2 * 8 * 4 * 1024 * 128 * 2
    temps = {}
    for layout in ("default", "auto"):   # auto: the compiler's, on TPU
        cfg = workloads.make_config("llama_decode", "8b", {"L": "2", "S": "1024", "T": "16",
                                                           "cache_layout": layout})
        mesh, _ = topology_mesh("tpu-v5e", "4x2", workloads.get("llama_decode").mesh_axes)
        fn, args = serve.build_decode(cfg, mesh, abstract=True)
        compiled = fn.lower(*args).compile()
        temps[layout] = compiled.memory_analysis().temp_size_in_bytes
        assert args[1]["k_LBKSH"].sharding.shard_shape(args[1]["k_LBKSH"].shape) == \
            (2, 8, 4, 1024, 128)
    assert temps["default"] >= 2 * cache_bytes
    assert temps["auto"] < 0.1 * cache_bytes
