"""Chip figures the book does not give: AMD Instinct (predictions.chips_amd), NVIDIA fp32/tf32
peaks and host links, TPU host links. Expected values are the vendor's printed (dense) figures."""
from __future__ import annotations

import pytest

from predictions import hardware, roofline
from predictions.gpu_ids import GPU_IDS

T, P = 1e12, 1e15  # TFLOPS, PFLOPS


def near(x: float) -> object:
    return pytest.approx(x, rel=1e-3)  # the data sheets print 4-5 significant digits


@pytest.mark.parametrize("name, peaks", [
    # AMD Instinct MI300X / MI325X data sheets, dense: FP32 163.4, TF32 653.7, FP16/BF16 1307.4,
    # FP8 2614.9 TFLOPS, INT8 2614.9 TOPS
    ("mi300x", dict(fp32=163.4 * T, tf32=653.7 * T, bf16=1307.4 * T, fp8=2614.9 * T,
                    int8=2614.9 * T)),
    ("mi325x", dict(fp32=163.4 * T, tf32=653.7 * T, bf16=1307.4 * T, fp8=2614.9 * T)),
    # MI350X: 256 CUs x 2.2 GHz; printed FP32 144.2 TFLOPS, BF16 2.3, FP8 4.6, MXFP6/4 9.2 PFLOPS
    ("mi350x", dict(fp32=144.2 * T, bf16=256 * 2.2e9 * 4096, fp8=256 * 2.2e9 * 8192,
                    fp6=256 * 2.2e9 * 16384, fp4=256 * 2.2e9 * 16384)),
    # MI355X: FP32 157.3 TFLOPS, BF16 2516.6 TFLOPS, FP8 5.0 and MXFP6/MXFP4 10.1 PFLOPS
    ("mi355x", dict(fp32=157.3 * T, bf16=2516.6 * T, fp8=2 * 2516.6 * T, fp6=4 * 2516.6 * T,
                    fp4=4 * 2516.6 * T)),
])
def test_amd_dense_peaks(name, peaks):
    c = hardware.chip(name)
    assert c.kind == "gpu"
    for dtype, value in peaks.items():
        assert c.flops_per_s(dtype) == near(value), dtype
    assert c.flops_per_s("bf16") == c.flops_per_s("fp16")  # fp16 runs at the bf16 rate


def test_amd_memory_and_links():
    # HBM: MI300X 192 GB at 5.3 TB/s, MI325X 256 GB at 6 TB/s, MI350X/MI355X 288 GB at 8 TB/s
    for name, gb, tbps in (("mi300x", 192, 5.3), ("mi325x", 256, 6.0), ("mi350x", 288, 8.0),
                           ("mi355x", 288, 8.0)):
        c = hardware.chip(name)
        assert (c.hbm_bytes, c.hbm_bytes_per_s) == (gb * 1e9, near(tbps * 1e12))
        assert c.ici_links == 7 and c.chips_per_node == 8
        # PCIe Gen5 x16: 128 GB/s both ways, 64 GB/s each way
        assert c.pcie_bytes_per_s == 64e9
    # Infinity Fabric: 128 GB/s per link (CDNA 3), 153.6 GB/s (CDNA 4), both directions;
    # egress one way over 7 links
    assert hardware.chip("mi300x").ici_bytes_per_s == near(7 * 64e9)
    assert hardware.chip("mi355x").ici_bytes_per_s == near(7 * 76.8e9)
    # CDNA 4 lists no TF32 rate
    with pytest.raises(KeyError, match="mi355x.*tf32"):
        hardware.chip("mi355x").flops_per_s("tf32")


@pytest.mark.parametrize("name, fp32, tf32", [
    ("a100", 19.5 * T, 156 * T),          # A100 data sheet (SXM): TF32 312 with sparsity
    ("h100", 67 * T, 989 * T / 2),        # H100 SXM data sheet: TF32 989 with sparsity
    ("h200", 67 * T, 989 * T / 2),        # H200 SXM data sheet, as H100
    ("b200", 600 * T / 8, 18 * P / 8 / 2),  # HGX B200 (8 GPUs): FP32 600 T, TF32 18 P sparse
])
def test_nvidia_fp32_and_tf32(name, fp32, tf32):
    c = hardware.chip(name)
    assert (c.flops_per_s("fp32"), c.flops_per_s("tf32")) == (near(fp32), near(tf32))
    assert {"fp32", "tf32", "bf16", "fp8"} <= set(c.dtypes)


def test_host_links():
    # tpus.md table: 16 GB/s each way (v4p, v5p, v5e), v6e 32 GB/s; v3 and 7x: not given
    assert [hardware.chip(n).pcie_bytes_per_s for n in ("tpu-v4p", "tpu-v5p", "tpu-v5e",
                                                        "tpu-v6e")] == [16e9, 16e9, 16e9, 32e9]
    assert hardware.chip("tpu-v3").pcie_bytes_per_s is None
    assert hardware.chip("tpu-7x").pcie_bytes_per_s is None
    # NVIDIA data sheets: A100 PCIe Gen4 64 GB/s, H100/H200 PCIe Gen5 128 GB/s (both ways)
    assert hardware.chip("a100").pcie_bytes_per_s == 32e9
    assert hardware.chip("h100").pcie_bytes_per_s == hardware.chip("h200").pcie_bytes_per_s == 64e9
    assert roofline.critical_intensity("h100", over="pcie") == pytest.approx(9.89e14 / 64e9)


@pytest.mark.parametrize("kind, name", [
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI355X", "mi355x"), ("mi350x", "mi350x"),
])
def test_amd_device_kinds(kind, name):
    assert hardware.chip_for(kind).name == name


def test_every_gpu_has_an_id():
    gpus = {n for n, c in hardware.CHIPS.items() if c.kind == "gpu"}
    assert set(GPU_IDS) == gpus
