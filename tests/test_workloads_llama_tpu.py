"""LLaMA-3 as MaxText runs it on TPU: splash attention (``workloads.llama.splash``) and remat
policies by name (``workloads.llama.remat``).

Splash runs here in Pallas' interpreter on the CPU, checked against XLA's attention; the TPU
compiles (marked ``libtpu``) check that the Mosaic kernels and the host offload compile ahead of
time. ``fixtures/tpu/llama_train_offload``: the tiny step (L = 2, B = 8, T = 16, N = 8, K = 4,
H = 8) with ``remat=qkv_proj_offloaded``, fsdp_tp on a v5e 2x2 slice (per device B = 4, N = 4,
K = 2)."""
import gzip
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workloads
from harness.hlo import executed, instruction_cost, parse_module
from harness.hlo.spaces import HOST
from workloads.base import WorkloadError
from workloads.llama import attention as gqa
from workloads.llama import memory, remat, splash
from workloads.llama.config import Dims
from workloads.llama.sharding import Sharder
from workloads.mesh import make_mesh

FIXTURES = Path(__file__).parent / "fixtures" / "tpu"


# --- splash attention ---------------------------------------------------------------------------
@pytest.mark.parametrize("T, block", [(4096, 512), (8192, 512), (512, 512), (256, 256),
                                      (640, 128), (384, 384), (100, None), (200, None)])
def test_block_is_maxtexts_512_capped_at_a_divisor_of_T(T, block):
    assert splash.MAXTEXT.size_for(T) == block


@pytest.mark.parametrize("T, block", [(8192, 2048), (4096, 2048), (6144, 2048), (1024, 1024),
                                      (2560, 1280)])
def test_a_tuned_block_is_capped_the_same_way(T, block):
    assert splash.Blocks(2048, fused_bwd=True).size_for(T) == block


def test_splash_block_must_be_a_multiple_of_128():
    with pytest.raises(WorkloadError, match="splash_block must be a positive multiple of 128"):
        workloads.make_config("llama_train", "tiny", {"splash_block": "200"})


def test_splash_matches_xla_attention_in_interpret_mode():
    # 8 query heads over 2 KV heads, 256 tokens (one 256-token block), under shard_map on 2x4
    # fsdp_tp: the 4 model devices outnumber K = 2, so each KV head is repeated twice
    B, T, N, K, H = 2, 256, 8, 2, 64
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32)
               for s in ((B, T, N, H), (B, T, K, H), (B, T, K, H)))
    sh = Sharder(make_mesh("2x4", ("X", "Y")), "fsdp_tp", Dims(N=N, K=K, H=H))
    assert sh.kv_repeat == 2

    def ours(q, k, v):
        if sh.kv_repeat > 1:
            k, v = (jnp.repeat(a, sh.kv_repeat, axis=2) for a in (k, v))
        return splash.attention(q, k, v, sh, interpret=True)

    def xla(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")

    np.testing.assert_allclose(jax.jit(ours)(q, k, v), xla(q, k, v), atol=1e-5, rtol=1e-5)
    loss = lambda f: lambda *a: jnp.sum(f(*a) ** 2)  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(xla), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_fused_picks_splash_on_tpu_for_causal_attention_over_128_tokens(monkeypatch):
    sh = Sharder(None, "dp", Dims())
    q = lambda T: jax.ShapeDtypeStruct((1, T, 4, 128), jnp.bfloat16)  # noqa: E731
    assert gqa.fused_implementation(q(4096), True, sh) == "xla"     # CPU here
    monkeypatch.setattr(gqa, "_platform", lambda sh: "tpu")
    assert gqa.fused_implementation(q(4096), True, sh) == "splash"
    assert gqa.fused_implementation(q(4096), False, sh) == "xla"    # decode over a cache
    assert gqa.fused_implementation(q(64), True, sh) == "xla"       # MaxText: under 128
    monkeypatch.setattr(gqa, "_platform", lambda sh: "gpu")
    assert gqa.fused_implementation(q(4096), True, sh) == "cudnn"


@pytest.mark.libtpu
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_train_step_compiles_splash_kernels_for_a_tpu_slice():
    from workloads.aot import compile_in_subprocess

    aot = compile_in_subprocess("llama_train", "tiny", {"T": "256", "H": "128"}, "2x2",
                                tpu_chip="tpu-v5e")
    module = parse_module(aot.hlo_text)
    kernels = {i.name.split(".")[0] for i, _ in executed(module) if i.name.startswith("splash")}
    assert kernels == {"splash_mha_fwd_residuals", "splash_mha_dq_no_residuals",
                       "splash_mha_dkv_no_residuals"}
    assert all(instruction_cost(i, module).modeled for i, _ in executed(module))


# --- remat policies by name ---------------------------------------------------------------------
def test_unknown_remat_is_a_one_line_error_naming_the_valid_ones():
    with pytest.raises(WorkloadError) as info:
        workloads.make_config("llama_train", "tiny", {"remat": "save_everything"})
    message = str(info.value)
    assert "\n" not in message and "unknown remat 'save_everything'" in message
    assert all(name in message for name in (*remat.POLICIES, "custom"))


@pytest.mark.parametrize("sets, expected", [
    ({"remat": "custom", "remat_offload": "query_proj,mlp_in"},
     "unknown checkpoint name(s) mlp_in in remat_save/remat_offload; valid: query_proj"),
    ({"remat": "minimal", "remat_save": "context"}, "apply to remat=custom only"),
])
def test_custom_remat_names_are_checked(sets, expected):
    with pytest.raises(WorkloadError, match=re.escape(expected)):
        workloads.make_config("llama_train", "tiny", sets)


# Dots in the compiled step (scan: one layer body each way), XLA's attention on the CPU.
# Forward: 7 projections + QK^T and PV per layer, + the logits = 10. Backward: two per forward
# dot (the input's and the weight's gradient; dQ/dK and dP/dV for attention) = 20. Then the
# forward dots the backward pass recomputes, those whose outputs it needs and the policy does not
# keep (the MLP's down projection is never needed: its output only joins the residual).
RECOMPUTED = {
    "none": 0,
    "minimal_with_context": 1,          # QK^T: the softmax's gradient needs P; PV's output kept
    "minimal": 2,                       # QK^T, PV
    "save_dot_except_mlpwi": 4,         # QK^T, PV, gate, up
    "save_qkv_proj": 5,                 # QK^T, PV, the output projection, gate, up
    "full": 8,                          # Q, K, V, QK^T, PV, the output projection, gate, up
}


@pytest.fixture(scope="module")
def compiled_by_policy():
    # activations dominate: 8 layers, 128 tokens, a vocabulary of 64
    out = {}
    for name in RECOMPUTED:
        cfg = workloads.make_config("llama_train", "tiny", {
            "remat": name, "L": "8", "T": "128", "F": "256", "V": "64"})
        fn, args = workloads.get("llama_train").build(cfg, None, abstract=True)
        compiled = fn.lower(*args).compile()
        out[name] = (parse_module(compiled.as_text()), compiled.memory_analysis())
    return out


def test_each_policy_recomputes_the_dots_it_does_not_keep(compiled_by_policy):
    dots = {name: sum(i.opcode == "dot" for c in module.computations.values()
                      for i in c.instructions)
            for name, (module, _) in compiled_by_policy.items()}
    assert dots == {name: 10 + 20 + n for name, n in RECOMPUTED.items()}


def test_keeping_less_needs_fewer_temporaries(compiled_by_policy):
    temp = {name: m.temp_size_in_bytes for name, (_, m) in compiled_by_policy.items()}
    chain = ["none", "minimal", "save_dot_except_mlpwi", "save_qkv_proj", "full"]
    assert [temp[a] > temp[b] for a, b in zip(chain, chain[1:])] == [True] * 4


def test_activation_bytes_are_the_saved_widths():
    # transformers.md: bytes · tokens · L · Σ(saved widths); the layer input D always
    cfg = workloads.make_config("llama_train", "8b", {"remat": "save_dot_except_mlpwi"})
    tokens, D, N, K, H = cfg.B * cfg.T, 4096, 32, 8, 128
    widths = D + N * H + 2 * K * H + D + D     # input, Q, K, V, out_proj, mlpwo
    assert memory.train_bytes(cfg)["activations"] == 2 * tokens * 32 * widths
    offloaded = workloads.make_config("llama_train", "8b", {"remat": "minimal_offloaded"})
    assert memory.train_bytes(offloaded)["activations"] == 2 * tokens * 32 * D
    # MaxText's 8B v6e recipe: the layer input and Q, K, V, out_proj offloaded, nothing kept
    recipe = workloads.make_config("llama_train", "8b", {
        "remat": "custom", "remat_offload": "decoder_layer_input,query_proj,key_proj,"
                                            "value_proj,out_proj"})
    assert memory.train_bytes(recipe)["activations"] == 0


def test_offloaded_qkv_go_to_host_memory_and_back():
    raw = (FIXTURES / "llama_train_offload.hlo.txt.gz").read_bytes()
    module = parse_module(gzip.decompress(raw).decode())
    host = [(i, n) for i, n in executed(module) if instruction_cost(i, module).host_bytes]
    assert {i.opcode for i, _ in host} == {"dynamic-update-slice-start", "dynamic-slice-start"}
    assert all(HOST in i.memory_spaces for i, _ in host)   # the S(5) buffer, each way
    # Q, K, V of each of the 2 layers, per device [4, 16, 4 | 2 | 2, 8] bf16, out and back in
    qkv = 4 * 16 * (4 + 2 + 2) * 8 * 2
    moved = sum(n * instruction_cost(i, module).host_bytes for i, n in host)
    assert moved == 2 * 2 * qkv


@pytest.mark.slow
@pytest.mark.libtpu
def test_offloading_lowers_the_peak_through_libtpu():
    from workloads.aot import compile_in_subprocess

    peak, spaces = {}, {}
    for name in ("save_qkv_proj", "qkv_proj_offloaded"):
        aot = compile_in_subprocess("llama_train", "tiny", {"T": "256", "H": "128",
                                                            "remat": name}, "2x2",
                                    tpu_chip="tpu-v5e")
        peak[name] = aot.memory["peak"]
        module = parse_module(aot.hlo_text)
        spaces[name] = {s for c in module.computations.values() for i in c.instructions
                        for s in i.memory_spaces}
    assert HOST in spaces["qkv_proj_offloaded"] and HOST not in spaces["save_qkv_proj"]
    assert peak["qkv_proj_offloaded"] < peak["save_qkv_proj"]


@pytest.mark.libtpu
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_maxtexts_tuned_recipe_compiles_fused_backward_and_offloads_the_layer_input():
    # 2 layers of D = 64 (32 per device on the model axis), 512 tokens in 256 blocks
    from workloads.aot import compile_in_subprocess

    aot = compile_in_subprocess("llama_train", "tiny", {
        "T": "512", "H": "128", "splash_block": "256", "splash_fused_bwd": "true",
        "remat": "custom", "remat_offload": "decoder_layer_input"}, "2x2", tpu_chip="tpu-v5e")
    module = parse_module(aot.hlo_text)
    kernels = [i for i, _ in executed(module) if i.name.startswith("splash")]
    assert {i.name.split(".")[0] for i in kernels} == {"splash_mha_fwd_residuals",
                                                       "splash_mha_dkv_no_residuals"}
    dkv = next(i for i in kernels if "dkv" in i.name)
    fwd = next(i for i in kernels if "fwd" in i.name)
    assert instruction_cost(dkv, module).flops == 2.5 * instruction_cost(fwd, module).flops
    to_host = [i for i, _ in executed(module) if i.opcode == "dynamic-update-slice-start"
               and HOST in i.memory_spaces]
    layer_input = (1, 4, 512, 32)   # one layer's [B/2, T, D/2] per device
    assert to_host and all(i.operand_shapes[1][0].dims == layer_input for i in to_host)
