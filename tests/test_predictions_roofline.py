"""predictions.roofline (roofline.md, gpus.md): critical intensities, matmul, op_time."""
from __future__ import annotations

import pytest

from predictions import collectives, hardware, roofline
from predictions.rules import Cost

# Reference §3: C/W per chip. Bold book values are tight; the others are computed from the spec
# tables and the book rounds inputs, hence the few-% tolerance.
HBM = {"tpu-v3": 156, "tpu-v4p": 229, "tpu-v5p": 164, "tpu-v5e": 240, "tpu-v6e": 575,
       "tpu-7x": 311, "a100": 155, "h100": 295, "h200": 206, "b200": 281}
ICI = {"tpu-v3": 700, "tpu-v4p": 3056, "tpu-v5p": 2550, "tpu-v5e": 2189, "tpu-v6e": 5111,
       "tpu-7x": 12778, "a100": 1033, "h100": 2200, "h200": 2200, "b200": 2556}
DCN = {"tpu-v5p": 73440, "tpu-v5e": 63040, "tpu-v6e": 73600, "tpu-7x": 184000,
       "h100": 2475, "b200": 5750}
PCIE = {"tpu-v4p": 17188, "tpu-v5p": 28688, "tpu-v5e": 12313, "tpu-v6e": 28750}


@pytest.mark.parametrize("over, table", [("hbm", HBM), ("ici", ICI), ("dcn", DCN),
                                         ("pcie", PCIE)])
def test_critical_intensities_match_the_book_table(over, table):
    for name, expected in table.items():
        got = roofline.critical_intensity(name, "bf16", over)
        assert got == pytest.approx(expected, rel=0.03), name


def test_rf_ex2_v5e_critical_intensity():
    # roofline.md: alpha = 1.97e14 / 8.2e11 ~ 240 FLOPs/byte
    assert roofline.critical_intensity("tpu-v5e") == pytest.approx(1.97e14 / 8.2e11)
    assert roofline.critical_intensity("tpu-v5e") == pytest.approx(240, rel=0.01)


def test_gp_q13_gpu_critical_intensity():
    # gpus.md: H100 295, B200 281; fp8 doubles to 590 and 562
    assert roofline.critical_intensity("h100") == pytest.approx(295, rel=0.01)
    assert roofline.critical_intensity("b200") == pytest.approx(281, rel=0.01)
    assert roofline.critical_intensity("h100", "fp8") == pytest.approx(590, rel=0.01)
    assert roofline.critical_intensity("b200", "fp8") == pytest.approx(562, rel=0.01)


def test_tr_ex1_v5p_ici_intensity():
    # training.md: C / W_ici = 4.59e14 / (2 * 9e10) = 2550
    assert roofline.critical_intensity("tpu-v5p", over="ici") == pytest.approx(2550, rel=0.005)


def test_missing_link_and_unknown_link_are_clear():
    with pytest.raises(ValueError, match=r"no dcn bandwidth for tpu-v3.*tpu-v5p"):
        roofline.critical_intensity("tpu-v3", over="dcn")
    with pytest.raises(ValueError, match="hbm, ici, dcn, pcie"):
        roofline.critical_intensity("tpu-v5e", over="nvlink")
    with pytest.raises(KeyError, match="known chips"):
        roofline.critical_intensity("tpu-v9")


def test_matmul_bf16_terms():
    # roofline.md: FLOPs 2BDF, bytes 2BD + 2DF + 2BF, T = max(FLOPs/C, bytes/W)
    B, D, F = 512, 8192, 28672
    m = roofline.matmul(B, D, F, "tpu-v5e")
    assert m.flops == 2 * B * D * F
    assert m.bytes == 2 * B * D + 2 * D * F + 2 * B * F
    assert m.t_compute_s == pytest.approx(2 * B * D * F / 1.97e14)
    assert m.t_memory_s == pytest.approx((2 * B * D + 2 * D * F + 2 * B * F) / 8.2e11)
    assert m.t_lower_s == max(m.t_compute_s, m.t_memory_s)
    assert m.t_upper_s == pytest.approx(m.t_compute_s + m.t_memory_s)
    assert m.t_upper_s <= 2 * m.t_lower_s  # roofline.md: the bounds differ by at most 2x
    assert m.bound == "compute"  # B = 512 > 240
    assert roofline.matmul(128, D, F, "tpu-v5e").bound == "memory"  # B = 128 < 240


def test_matmul_intensity_tends_to_b_and_crosses_at_alpha():
    # roofline.md: I ~ B when B << D, F; compute-bound once B exceeds alpha ~ 240
    D = F = 2 ** 20
    assert roofline.matmul(64, D, F, "tpu-v5e").intensity == pytest.approx(64, rel=0.001)
    assert roofline.matmul(230, D, F, "tpu-v5e").bound == "memory"
    assert roofline.matmul(250, D, F, "tpu-v5e").bound == "compute"


def test_matmul_int8_weights_halve_the_critical_batch():
    # roofline.md: int8 weights + bf16 compute: I ~ 2B, so B_crit = 120 on v5e
    D = F = 2 ** 20
    assert roofline.matmul(110, D, F, "tpu-v5e", weight_dtype="int8").bound == "memory"
    assert roofline.matmul(130, D, F, "tpu-v5e", weight_dtype="int8").bound == "compute"
    # int8 weights and int8 compute (2x C): back to ~240
    assert roofline.matmul(230, D, F, "tpu-v5e", dtype="int8").bound == "memory"
    assert roofline.matmul(250, D, F, "tpu-v5e", dtype="int8").bound == "compute"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_matmul_rejects_non_positive_sizes(bad):
    with pytest.raises(ValueError, match="B must be positive"):
        roofline.matmul(bad, 8, 8, "tpu-v5e")


def test_op_time_terms_and_bounds():
    c = hardware.chip("tpu-v5e")
    t = roofline.op_time(Cost(flops=1.97e14, hbm_bytes=8.2e11 / 2), c)
    assert (t.t_compute_s, t.t_memory_s, t.t_comm_s) == (pytest.approx(1.0),
                                                         pytest.approx(0.5), 0.0)
    assert t.predicted_s == pytest.approx(1.0) and t.bound == "compute"
    t = roofline.op_time(Cost(flops=1.0, hbm_bytes=8.2e11), c)
    assert t.bound == "memory" and t.predicted_s == pytest.approx(1.0)


def test_op_time_adds_the_chips_per_op_overhead_after_the_max():
    """T = max(T_math, T_hbm, T_comm) + the fixed cost per execution; the book's chips have
    none, so their times are the book's T_lower unchanged."""
    assert all(c.op_overhead_s == 0.0 for c in hardware.CHIPS.values() if c.kind != "cpu")
    import dataclasses
    c = dataclasses.replace(hardware.chip("tpu-v5e"), op_overhead_s=0.25)
    t = roofline.op_time(Cost(flops=1.97e14, hbm_bytes=8.2e11 / 2), c)  # 1 s compute, 0.5 memory
    assert t.predicted_s == pytest.approx(1.0 + 0.25) and t.bound == "compute"
    t = roofline.op_time(Cost(flops=1.97e13, hbm_bytes=8.2e10 / 2), c)  # 0.1 s, 0.05 s
    assert t.predicted_s == pytest.approx(0.1 + 0.25) and t.bound == roofline.OVERHEAD
    assert (t.t_compute_s, t.t_memory_s) == (pytest.approx(0.1), pytest.approx(0.05))


def test_op_time_comm_term_dispatches_on_the_collective():
    cost = Cost(hbm_bytes=1e3, comm_bytes=34e6, collective="all-gather", group_axes=(4,))
    t = roofline.op_time(cost, "tpu-v5e")
    assert t.t_comm_s == pytest.approx(collectives.all_gather(34e6, 4, "tpu-v5e"))
    assert t.bound == "comm" and t.predicted_s == t.t_comm_s
    permute = Cost(comm_bytes=9e6, collective="collective-permute")
    assert roofline.op_time(permute, "tpu-v5e").t_comm_s == pytest.approx(9e6 / 4.5e10)
    # a group of one device moves nothing
    alone = Cost(comm_bytes=1e6, collective="all-reduce", group_axes=())
    assert roofline.op_time(alone, "tpu-v5e").t_comm_s == 0.0
    # a logical group of 64 on v5e is laid over two physical axes (16 x 4)
    big = Cost(comm_bytes=1e8, collective="all-gather", group_axes=(64,))
    assert roofline.op_time(big, "tpu-v5e").t_comm_s == pytest.approx(
        collectives.all_gather(1e8, (16, 4), "tpu-v5e"))
    with pytest.raises(ValueError, match="unknown collective"):
        roofline.op_time(Cost(comm_bytes=1.0, collective="broadcast", group_axes=(2,)), "h100")


def test_op_time_unmodeled_is_zero_and_labelled():
    t = roofline.op_time(Cost(flops=1e9, modeled=False), "tpu-v5e")
    assert t == roofline.OpTime(0.0, 0.0, 0.0, 0.0, "unmodeled")


def test_op_time_dtype_fallback_for_types_without_a_book_peak():
    # f32 / integer ops on a TPU use the bf16 peak; the CPU placeholder has an fp32 peak
    assert roofline.peak_flops("tpu-v5e", "f32") == 1.97e14
    assert roofline.peak_flops("tpu-v5e", "s8") == 3.94e14
    assert roofline.peak_flops("cpu", "s32") == hardware.chip("cpu").flops_per_s("fp32")
    # f32 on a GPU runs on the tensor units as tf32 (XLA's default precision): H100 data sheet
    # TF32 989 TFLOPS with sparsity, half dense; a chip without tf32 takes its fp32 figure
    assert roofline.peak_flops("h100", "f32") == 989e12 / 2
    assert roofline.peak_flops("mi355x", "f32") == pytest.approx(157.3e12, rel=1e-3)
    t = roofline.op_time(Cost(flops=1.97e14), "tpu-v5e", "pred")
    assert t.t_compute_s == pytest.approx(1.0)


def test_memory_tiers_price_bytes_that_fit_at_the_tier_bandwidth():
    """An op whose bytes fit in a tier nearer the cores (a GPU's L2) is priced at that tier's
    bandwidth; beyond every tier, at HBM's. 1 MB at 10 TB/s is 100 ns; 4 MB at 1 TB/s, 4 us."""
    import dataclasses

    base = hardware.chip_entry("h100")
    chip = dataclasses.replace(base, name="tiered", memory_tiers=((2e6, 1e13),),
                               hbm_bytes_per_s=1e12)
    assert roofline.memory_bandwidth(chip, 1e6) == 1e13
    assert roofline.memory_bandwidth(chip, 2e6) == 1e13
    assert roofline.memory_bandwidth(chip, 4e6) == 1e12
    assert roofline.op_time(Cost(flops=0.0, hbm_bytes=1e6), chip).t_memory_s == pytest.approx(1e-7)
    assert roofline.op_time(Cost(flops=0.0, hbm_bytes=4e6), chip).t_memory_s == pytest.approx(4e-6)
    tpu = hardware.chip_entry("tpu-v5e")  # the book gives a TPU no cache tier: HBM throughout
    assert roofline.memory_bandwidth(tpu, 1.0) == tpu.hbm_bytes_per_s


def test_gpu_l2_tiers_are_the_books_and_the_data_sheets():
    # gpus.md: H100 (and H200, the same die) L2 50 MB, measured ~5.5 TB/s; beyond it, HBM
    for name, hbm in (("h100", 3.35e12), ("h200", 4.8e12)):
        assert roofline.memory_bandwidth(name, 50 * 2**20) == 5.5e12
        assert roofline.memory_bandwidth(name, 50 * 2**20 + 1) == hbm
    # A100 white paper: 40 MB L2, 5120 bytes/clk at 1.41 GHz
    assert roofline.memory_bandwidth("a100", 40 * 2**20) == pytest.approx(7.2192e12)
    # MI300X (AMD CDNA 3 white paper): 256 MB Infinity Cache at 17.2 TB/s
    assert roofline.memory_bandwidth("mi300x", 256 * 2**20) == 17.2e12
    assert roofline.memory_bandwidth("b200", 1.0) == 8.0e12  # no published L2 figure: HBM
