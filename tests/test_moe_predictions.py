"""Mixture-of-experts predictions (``predictions.moe``, ``harness predict moe``) against the book's
MoE answers (transformers.md §5.4, gpus.md "Expert parallelism" §6.2, inference.md §7.2) and
arithmetic on the published shapes, written out here independently of the code."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harness import cli
from predictions import moe, network

MIXTRAL, DEEPSEEK, MAVERICK = (moe.model(n) for n in ("mixtral_8x7b", "deepseek_v3",
                                                       "llama4_maverick"))


# --- parameters: the published totals from the published dims --------------------------------

def test_mixtral_8x7b_is_46_7b_total_12_9b_active():
    # HF config: L=32, D=4096, F=14336, N=32, K=8, H=128, V=32000, E=8, k=2
    expert, attn = 3 * 4096 * 14336, 2 * 4096 * (32 + 8) * 128
    rest = 32 * attn + 2 * 32000 * 4096 + 32 * 2 * 4096 + 4096 + 32 * 4096 * 8  # + router
    p = moe.params(MIXTRAL)
    assert p.total == 32 * 8 * expert + rest == 46_702_792_704
    assert p.active == 32 * 2 * expert + rest == 12_879_925_248
    # Mistral's published figures: 46.7B total, 12.9B active
    assert p.total == pytest.approx(46.7e9, rel=0.002)
    assert p.active == pytest.approx(12.9e9, rel=0.002)


def test_deepseek_v3_is_671b_total_37b_active_with_mla():
    # 58 MoE layers of 256 routed + 1 shared expert (F=2048), 3 dense layers (F=18432), MLA
    expert = 3 * 7168 * 2048
    mla = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
           + 128 * 128 * 7168 + 2 * 7168)
    rest = (58 * expert + 58 * 7168 * 256 + 3 * 3 * 7168 * 18432 + 61 * mla
            + 2 * 129280 * 7168 + 61 * 2 * 7168 + 7168)
    p = moe.params(DEEPSEEK)
    assert p.total == 58 * 256 * expert + rest
    assert p.active == 58 * 8 * expert + rest
    # arXiv 2412.19437: 671B total, 37B active (ours counts both embeddings as active: 37.6B)
    assert p.total == pytest.approx(671e9, rel=0.01)
    assert p.active == pytest.approx(37e9, rel=0.03)
    # what differs: pricing MLA as GQA attention (2D(N+K)H, K=N=128) overcounts by 17B
    gqa = moe.params(dataclasses.replace(DEEPSEEK, attention_params=0))
    assert gqa.active - p.active == 61 * (2 * 7168 * 256 * 128 - mla)
    assert gqa.active > 1.4 * 37e9


def test_llama4_maverick_is_400b_total_17b_active():
    # 24 MoE layers (128 experts + 1 shared, F=8192, k=1) alternating with 24 dense (F=16384)
    p = moe.params(MAVERICK)
    assert p.total == pytest.approx(400e9, rel=0.01)
    assert p.active == pytest.approx(17e9, rel=0.02)
    assert p.routed == 24 * 128 * 3 * 5120 * 8192


def test_flops_follow_the_active_parameters():
    p = moe.params(MIXTRAL)
    assert moe.forward_flops(MIXTRAL, 1000) == 2 * p.active * 1000      # §5.4
    assert moe.train_flops(MIXTRAL, 1000) == 6 * p.active * 1000        # §6.4
    # routed matmuls: 2 * tokens * k * 3DF per MoE layer forward, a training step 3x
    assert moe.routed_flops(MIXTRAL, 10) == 2 * 10 * 2 * 3 * 4096 * 14336 * 32
    assert moe.routed_flops(MIXTRAL, 10, training=True) == 3 * moe.routed_flops(MIXTRAL, 10)


# --- the critical batch grows by E/k ----------------------------------------------------------

def test_critical_batch_is_the_dense_one_times_e_over_k():
    # roofline.md: v5e 1.97e14 / 8.2e11 = 240 tokens; DeepSeek E/k = 256/8 = 32x
    dense = 1.97e14 / 8.2e11
    assert moe.critical_batch(DEEPSEEK, "tpu-v5e") == pytest.approx(32 * dense)
    assert moe.critical_batch(DEEPSEEK, "tpu-v5e") == pytest.approx(7688, rel=1e-3)
    # inference.md: int8 weights with bf16 compute halve it; int8 compute brings it back
    assert moe.critical_batch(DEEPSEEK, "tpu-v5e", 1) == pytest.approx(16 * dense)
    assert moe.critical_batch(DEEPSEEK, "tpu-v5e", 1, "int8") == pytest.approx(
        32 * 3.94e14 / (2 * 8.2e11))
    # Mixtral E/k = 4 on an H100 (the book's 295)
    assert moe.critical_batch(MIXTRAL, "h100") == pytest.approx(4 * 9.89e14 / 3.35e12)


# --- memory per device ------------------------------------------------------------------------

def test_memory_shards_the_experts_over_the_expert_axis():
    # DeepSeek's published layout: 64-way EP, 16-way PP, 2-way DP; Adam's 10 bytes/param
    mesh = {"data": 2, "stage": 16, "expert": 64}
    p = moe.params(DEEPSEEK)
    routed, other = moe.weight_bytes_per_device(DEEPSEEK, mesh, 10)
    assert routed == pytest.approx(10 * 58 * 256 * 3 * 7168 * 2048 / 64 / 16)
    assert other == pytest.approx(10 * (p.total - p.routed) / 16)
    # Z = 3 does not divide E = 8: a rank holds ceil(8/3) = 3 whole experts
    r3, _ = moe.weight_bytes_per_device(MIXTRAL, {"expert": 3}, 2)
    assert r3 == pytest.approx(2 * 3 * 32 * 3 * 4096 * 14336)


def test_the_kv_cache_is_unchanged_by_moe_and_mla_caches_its_latent():
    assert moe.kv_bytes_per_token(MIXTRAL) == 32 * 2 * 8 * 128 * 2      # §5.3: L*2KH*2
    assert moe.kv_bytes_per_token(DEEPSEEK) == 61 * (512 + 64) * 2      # MLA: 576 per layer


# --- the all-to-alls --------------------------------------------------------------------------

def test_dispatch_bytes_are_tokens_k_d_bytes_and_padding_scales_them():
    assert moe.dispatch_bytes(4096, 2, 4096) == 4096 * 2 * 4096 * 2 == 67_108_864
    assert moe.dispatch_bytes(4096, 2, 4096, capacity=1.25) == 1.25 * 67_108_864


def test_tpu_all_to_all_is_a_quarter_of_an_all_gather():
    # sharding.md on a wrapped ring of 8 v5p chips: V/(4 W_bidi) against V/W_bidi
    V = 2**30
    t = moe.all_to_all(V, "tpu-v5p", 8)
    assert t.seconds == pytest.approx(V / (4 * 1.8e11))
    assert t.seconds / t.all_gather_s == pytest.approx(0.25)


def test_gpu_all_to_all_in_a_node_and_across_nodes():
    sys = network.system("dgx-h100-superpod")
    V = 1e9
    # gpus.md: in a node V (N-1)/(N^2 W_gpu)
    assert moe.all_to_all(V, "h100", 8, sys).seconds == pytest.approx(V * 7 / (64 * 450e9))
    # 64 GPUs over 8 nodes: the node egress term V (M-1)/(M^2 W_node) binds
    t = moe.all_to_all(V, "h100", 64, sys)
    assert dict(t.levels)["leaf"] == pytest.approx(V * 7 / (64 * 400e9))
    assert t.seconds == pytest.approx(V * 7 / (64 * 400e9))


def test_gpus_md_expert_parallelism_at_a_worked_point():
    # DeepSeek's MoE layer, B = 524,288 tokens over 64-way EP on H100s (C 990e12, W_node 400e9)
    B, k, D, F, Z, C, W = 524_288, 8, 7168, 2048, 64, 990e12, 400e9
    assert moe.ep_math_s(B, k, D, F, Z, C) == pytest.approx(4 * B * k * D * F / (Z * C))
    assert moe.ep_math_s(B, k, D, F, Z, C) == pytest.approx(3.888e-3, rel=1e-3)
    # 4*B*D*(Z-8)/(W*Z) * min(8k/Z, 1) = 4 * 524288 * 7168 * 56 / (400e9 * 64) * 1
    assert moe.ep_comms_s(B, k, D, Z, W) == pytest.approx(32.88e-3, rel=1e-3)
    assert moe.ep_comms_s(B, k, D, 8, W) == 0.0  # inside one node the book charges nothing
    # ... which is two all-to-alls (dispatch, combine) of B*k*D*2 bytes priced at node egress
    a2a = moe.all_to_all(B * k * D * 2, "h100", Z, network.system("dgx-h100-superpod"))
    assert moe.ep_comms_s(B, k, D, Z, W) == pytest.approx(2 * a2a.seconds)
    # F = 2048 < 8 C / W = 19,800: EP stays within 1-2 nodes (Z < 8 + kFW/C = 14.6)
    assert not moe.ep_spans_nodes(F, C, W)
    assert moe.ep_max_Z(F, k, C, W) == pytest.approx(8 + 8 * 2048 * 400e9 / 990e12)
    # F >= 8 C / W: any number of nodes; k = 1 past Z = 8k: Z < 8 / (1 - FW/(8C))
    assert moe.ep_spans_nodes(32768, C, W) and moe.ep_max_Z(32768, 8, C, W) == math.inf
    assert moe.ep_max_Z(8192, 1, C, W) == pytest.approx(8 / (1 - 8192 * W / (8 * C)))


def test_dp_with_moe_needs_e_over_k_more_tokens():
    # gpus.md: B/X > (E/k) C/W; in one H100 node W = 450 GB/s
    assert moe.dp_min_tokens(MIXTRAL, "h100") == pytest.approx(4 * 9.89e14 / 450e9)
    # TPU v5p: training.md alpha_ici = 4.59e14 / 1.8e11 = 2550, times E/k = 4
    assert moe.dp_min_tokens(MIXTRAL, "tpu-v5p") == pytest.approx(4 * 2550)


# --- harness predict moe ----------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _keep_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")


def run(capsys, *argv):
    code = cli.main(["predict", "moe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_answers_deepseek_on_h800_nodes(capsys):
    code, out, err = run(capsys, "--model", "deepseek_v3", "--chip", "h100", "--system",
                         "h800-cluster", "--mesh", "data=2,expert=64", "--batch", "1048576",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["params"]["total"] == moe.params(DEEPSEEK).total
    assert data["critical_batch"]["bf16 weights"] == pytest.approx(32 * 9.89e14 / 3.35e12)
    assert data["all_to_all"]["tokens"] == 1048576 / 2
    assert data["all_to_all"]["ragged"]["nbytes"] == 524288 * 8 * 7168 * 2
    assert data["all_to_all"]["padded"]["nbytes"] == 1.25 * 524288 * 8 * 7168 * 2
    assert data["ep"]["bound"] == "comm" and data["ep"]["spans_nodes"] is False


def test_cli_table_and_shape_overrides(capsys):
    code, out, _ = run(capsys, "--model", "mixtral_8x7b", "--E", "16", "--k", "4", "--chip",
                       "tpu-v5p", "--mesh", "data=2,expert=4", "--format", "md")
    assert code == 0
    assert "E=16, k=4" in out and "§5.4" in out and "B_crit, bf16 weights" in out
    # E/k = 4 again: 4 * 4.59e14 / (2 * 2.8e12) = 656 tokens
    assert "| 656 tokens |" in out


def test_cli_bad_model_is_one_line_listing_the_choices(capsys):
    code, out, err = run(capsys, "--model", "gpt5", "--chip", "h100")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "gpt5" in lines[0]
    assert all(name in lines[0] for name in moe.MODELS)


def test_cli_mesh_without_an_expert_axis_is_one_line(capsys):
    code, _, err = run(capsys, "--model", "mixtral_8x7b", "--chip", "h100", "--mesh", "fsdp=8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "expert" in err
