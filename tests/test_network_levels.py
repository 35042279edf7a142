"""Collectives and thresholds past one GPU node or TPU slice (predictions.network, .levels,
.thresholds): the book's worked answers (gpus.md, training.md), expected values written out."""
from __future__ import annotations

import pytest

from predictions import collectives, levels, network, thresholds, training

SUPERPOD = "dgx-h100-superpod"
MS = 1e-3


def test_pop_quiz_3_outer_axis_allgather_in_one_su():
    # gpus.md Pop Quiz 3: AllGather_X(bf16[D_X, F_Y]) in one SU (256 GPUs), Y inner; Y <= 8:
    # bounded by the leaf, T = 2DF (32 - 1)/(32 * 400e9) = 1.30 ms whatever Y
    D, F = 8192, 32768
    for Y in (1, 2, 4, 8):
        groups = levels.mesh_groups((256 // Y, Y), (0,))
        t = levels.price("all-gather", 2 * D * F / Y, groups, SUPERPOD)
        assert t.seconds == pytest.approx(2 * D * F * 31 / (32 * 400e9))
        assert t.seconds == pytest.approx(1.30 * MS, rel=0.005)
        assert t.binding == "leaf"
    # Y > 8: 2DF / (Y * 50 GB/s), the book's "roughly", times the (X - 1)/X of X = 256 / Y nodes
    for Y in (16, 32):
        X = 256 // Y
        t = levels.price("all-gather", 2 * D * F / Y, levels.mesh_groups((X, Y), (0,)), SUPERPOD)
        assert t.seconds == pytest.approx(2 * D * F / (Y * 50e9) * (X - 1) / X)


def test_the_old_packing_was_ten_times_too_fast():
    # the issue: packing the 32-GPU outer group into 4 whole nodes gave 0.13 ms
    V = 2 * 8192 * 32768 / 8
    packed = collectives.all_gather(V, 32, "h100")
    assert packed == pytest.approx(V * 7 / (8 * 450e9))  # unchanged without a system
    spread = levels.estimate("all-gather", V, 32, SUPERPOD,
                                  groups=levels.mesh_groups((32, 8), (0,))).seconds
    assert spread / packed == pytest.approx((31 / (32 * 50e9)) / (7 / (8 * 450e9)))
    assert spread / packed > 9


def test_quiz_4_q5_two_node_allgather_and_cross_node_all_to_all():
    # gpus.md Quiz 4 Q5: over 2 nodes the node level binds: B 7/(8 * 450e9) against B/(2 * 400e9)
    B = 1e9
    t = levels.price("all-gather", B, (tuple(range(16)),), SUPERPOD)
    assert t.seconds == pytest.approx(B * 7 / (8 * 450e9)) and t.binding == "node"
    assert [c.t_s for c in t.crossings][1] == pytest.approx(B / 800e9)
    # gpus.md: an AllToAll over M = 4 nodes, B (M - 1)/(M^2 W_node)
    a2a = levels.price("all-to-all", B, (tuple(range(32)),), SUPERPOD)
    assert a2a.seconds == pytest.approx(B * 3 / (16 * 400e9))


def test_superpod_levels_and_spine():
    # gpus.md: node 8 x 450e9; leaf 32 nodes x 400e9; spine 4 SUs x 12.8e12 (1024 GPUs)
    s = network.system(SUPERPOD)
    assert [(lv.name, lv.span, lv.bytes_per_s) for lv in s.levels[:3]] == [
        ("node", 8, 450e9), ("leaf", 256, 400e9), ("spine", 1024, 12.8e12)]
    t = levels.price("all-gather", 1e9, (tuple(range(1024)),), s)
    spine = [c for c in t.crossings if c.level == "spine"][0]
    assert spine.t_s == pytest.approx(1e9 * 3 / (4 * 12.8e12))
    assert t.binding == "leaf"  # gpus.md: the leaf (~400 GB/s) binds, never the spine


def test_sharp_factor_is_a_field_theory_or_measured():
    # gpus.md: ring AllReduce 2x an AllGather; SHARP 2x faster in theory, ~30% measured
    g = (tuple(range(8)),)
    ring = levels.price("all-reduce", 1e9, g, SUPERPOD).seconds
    assert ring == pytest.approx(2 * 1e9 * 7 / (8 * 450e9))
    theory = levels.price("all-reduce", 1e9, g, network.with_sharp(SUPERPOD, "theory"))
    measured = levels.price("all-reduce", 1e9, g, network.with_sharp(SUPERPOD, "measured"))
    assert theory.seconds == pytest.approx(ring / 2) and "theory" in theory.formula
    assert measured.seconds == pytest.approx(ring / 1.3) and "measured" in measured.formula


def test_dp_fsdp_thresholds_across_nodes():
    # gpus.md: past a node B/X > C/W_node = 990e12/400e9 = 2475 (the chip: 9.89e14 -> 2472.5)
    v = training.verdict("fsdp", 4e6, "h100", 4096, 1)
    assert v.have == pytest.approx(4e6 / 4096)  # 977 tokens per GPU
    assert v.need == pytest.approx(9.89e14 / 400e9 * 511 / 512)  # a ring over 512 nodes
    assert v.need == pytest.approx(2475, rel=0.01) and v.bound == "comm"
    # inside one node unchanged: C / W_gpu (2198 on H100)
    assert training.verdict("fsdp", 4e6, "h100", 8, 1).need == pytest.approx(9.89e14 / 450e9)


def test_small_dp_groups_get_the_x_minus_1_over_x():
    # gpus.md "What happens when X is small?": 2 nodes, B/N > alpha (X - 1)/X = 1237
    v = training.verdict("dp", 16 * 1300, "h100", 16, 1)
    assert v.need == pytest.approx(9.89e14 / 400e9 * 1 / 2)
    assert v.need == pytest.approx(1237, rel=0.001) and v.bound == "compute"


def test_model_parallel_spanning_nodes_lowers_fsdp_quiz_5():
    # gpus.md Quiz 5 Q2: LLaMA-3 70B, 4096 H100, 4M tokens: ZeRO-3 + 8-way TP has 976 per GPU,
    # comm-bound; with 8-way PP the model-parallel shard spans 8 nodes, 8 x 400 GB/s -> 309
    F = 28672
    zero3 = training.verdict("fsdp_tp", 4e6, "h100", 512, 8, F=F)
    assert zero3.have == pytest.approx(976, rel=0.001) and zero3.bound == "comm"
    pp = training.verdict("fsdp_tp", 4e6, "h100", 64, 8, F=F, inner=8)
    assert pp.need == pytest.approx(9.89e14 / 3200e9 * 63 / 64)  # 64 nodes in the ring
    assert pp.need == pytest.approx(309, rel=0.03) and pp.bound == "compute"


def test_megatron_quiz_5_q3_two_and_eight_nodes_of_model_parallelism():
    # gpus.md Quiz 5 Q3: 16-way model sharding -> 2x better (~1k), 64-way -> 8x (~300)
    need16, _ = thresholds.dp_min_tokens(SUPERPOD, X=768 // 16, inner=16)
    need64, _ = thresholds.dp_min_tokens(SUPERPOD, X=3072 // 64, inner=64)
    assert need16 / 16 == pytest.approx(9.89e14 / (2 * 400e9) * 47 / 48)
    assert need64 / 64 == pytest.approx(9.89e14 / (8 * 400e9) * 47 / 48)
    assert need64 / 64 == pytest.approx(300, rel=0.02)


def test_tp_across_two_nodes():
    # gpus.md: TP in a node Y < F/2200; spanning 2 nodes F > 2475 (Y - 8): up to 19-way at F = 28000
    assert thresholds.max_tp(28000, SUPERPOD) == pytest.approx(8 + 28000 * 400e9 / 9.89e14)
    assert thresholds.max_tp(28000, SUPERPOD) == pytest.approx(19.3, abs=0.05)
    assert thresholds.max_tp(8000, SUPERPOD) == pytest.approx(8000 * 450e9 / 9.89e14)
    assert training.verdict("tp", 1e6, "h100", 1, 16, F=28000).bound == "compute"
    assert training.verdict("tp", 1e6, "h100", 1, 24, F=28000).bound == "comm"


def test_b200_h800_nvl72_and_moe():
    # gpus.md Quiz 5 Q1: B200 DP past a node 2250e12/400e9 = 5625; TP in node F/2500
    need, a = thresholds.dp_min_tokens("dgx-b200", X=1024)
    assert need == pytest.approx(2.25e15 / 400e9 * 127 / 128) and a.level == "leaf"
    assert thresholds.max_tp(16000, "dgx-b200") == pytest.approx(16000 / 2500)
    # gpus.md: DeepSeek's H800s at 300 GB/s need 990e12/300e9 = 3300 tokens per GPU in a node
    assert thresholds.dp_min_tokens("h800-cluster", X=8)[0] == pytest.approx(9.89e14 / 300e9)
    # GB200 NVL72: 72 GPUs in one NVLink domain; F/2500 of TP stays inside it
    assert network.system("gb200-nvl72").domain == 72
    assert thresholds.max_tp(28000, "gb200-nvl72") == pytest.approx(28000 / 2500)
    # gpus.md MoE: B/X > (E/k) C/W: 32 x 2475 = 79,200 across nodes (k = 4, E = 128)
    moe, _ = thresholds.dp_min_tokens(SUPERPOD, X=4096, E=128, k=4)
    assert moe == pytest.approx(32 * 9.89e14 / 400e9 * 511 / 512)


def test_dcn_threshold_and_the_two_pod_example():
    # training.md: C/W_dcn = 4.59e14/6.25e9 = 73,440 tokens per slice
    assert thresholds.dcn_min_tokens_per_slice("tpu-v5p") == pytest.approx(73440)
    # two v5p pods, BS = 2M: 1M per pod > 73,440, 111 per TPU
    assert 2e6 / 2 > thresholds.dcn_min_tokens_per_slice("tpu-v5p")
    assert 2e6 / (2 * 8960) == pytest.approx(111, rel=0.01)
    # the gradient AllReduce: RS in each pod, AR over DCN at M x W_dcn, AG back; the DCN
    # part is 2 V (S - 1)/(S M W_dcn) with S = 2 pods (training.md: 2V/(M W_dcn), no (S-1)/S)
    s = network.tpu_slices("tpu-v5p", 8960, 2)
    V = 4 * 8192 * 28672
    t = levels.price("all-reduce", V, (tuple(range(2 * 8960)),), s)
    dcn = [c for c in t.crossings if c.level == "dcn"][0]
    assert 2 * dcn.t_s == pytest.approx(2 * V * (1 / 2) / (8960 * 6.25e9))
    ici = [c for c in t.crossings if c.level == "ici"][0]
    assert t.seconds == pytest.approx(2 * ici.t_s + 2 * dcn.t_s)


def test_estimate_without_a_system_is_unchanged_and_tpu_still_refuses():
    assert collectives.all_gather(1e9, 8, "h100") == pytest.approx(1e9 * 7 / (8 * 450e9))
    with pytest.raises(ValueError, match="DCN"):
        collectives.all_gather(1e6, 32, "tpu-v5e")
    # with slices over DCN: a group of 32 on two v5e 16-chip slices
    s = network.tpu_slices("tpu-v5e", 16, 2)
    t = levels.estimate("all-gather", 1e9, 32, s)
    assert "dcn: D=2" in t.formula and t.seconds > 0


def test_unknown_names():
    with pytest.raises(KeyError, match="known"):
        network.system("dgx-z9")
    with pytest.raises(ValueError, match="SHARP"):
        network.with_sharp(SUPERPOD, "hope")
    with pytest.raises(ValueError, match="not a TPU"):
        network.tpu_slices("h100", 8)
