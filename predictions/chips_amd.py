"""AMD Instinct chips (CDNA 3: MI300X, MI325X; CDNA 4: MI350X, MI355X), from AMD's data sheets.

The book covers TPUs and NVIDIA GPUs only; these figures are AMD's published ones, each cited on
its entry. ``SPECS`` holds each chip's ``predictions.hardware.Chip`` fields by name;
``hardware.CHIPS`` registers them beside the book's chips.

All FLOP/s are **dense** peaks (AMD prints a second, "with structured sparsity" figure, twice
these, for fp16/bf16/fp8/int8/tf32; it is not used). AMD's data sheets compute each peak as
compute units x peak engine clock x FLOP per clock per CU (the footnotes of the MI300X and
MI355X data sheets), so the entries are written that way and the printed figure is quoted in
the comment beside it.
"""
from __future__ import annotations


def _peaks(cus: int, clock_hz: float, **per_clock: int) -> tuple[tuple[str, float], ...]:
    """Dense peaks: CUs x peak engine clock x FLOP/clock/CU, per dtype (AMD's own arithmetic)."""
    return tuple((dtype, cus * clock_hz * n) for dtype, n in per_clock.items())


# FLOP per clock per CU, dense (AMD CDNA 3 and CDNA 4 white papers, matrix cores; fp32 is the
# matrix rate, equal to the packed-vector rate). CDNA 4 lists no TF32 rate and adds fp6/fp4
# (MXFP6/MXFP4, both at the same rate).
_CDNA3 = dict(fp32=256, tf32=1024, bf16=2048, fp8=4096, int8=4096)
_CDNA4 = dict(fp32=256, bf16=4096, fp8=8192, int8=8192, fp6=16384, fp4=16384)

# Interconnect, every chip here: 7 AMD Infinity Fabric links per GPU, each to one of the 7 other
# GPUs of an 8-GPU platform (a full mesh, no switch). ``ici_bytes_per_s`` is the registry's GPU
# figure, egress per GPU in one direction: 7 links x (the data sheet's per-link peak / 2, as
# AMD quotes both directions together). The collective model treats the mesh like a switch;
# a group of fewer than 8 GPUs reaches fewer links, so its prediction is optimistic.
# Host link: PCIe Gen5 x16, 128 GB/s both directions (the data sheets' "Bus Type"), 64e9 each way.
# hop_latency_s: AMD gives none; 1 us as for the book's GPUs (an assumption).
_GPU = dict(kind="gpu", ici_links=7, torus_dims=0, max_slice=(), wrap_rule="always",
            hop_latency_s=1e-6, chips_per_node=8, pcie_bytes_per_s=128e9 / 2)

SPECS: dict[str, dict] = {
    "mi300x": dict(
        # AMD Instinct MI300X data sheet: 304 CUs, 2100 MHz peak engine clock; FP32 163.4,
        # TF32 653.7, FP16/BF16 1307.4, FP8 2614.9 TFLOPS and INT8 2614.9 TOPS (dense);
        # 192 GB HBM3 at 5.3 TB/s; 7 Infinity Fabric links, 128 GB/s peak each (896 GB/s).
        # AMD CDNA 3 white paper: 256 MB AMD Infinity Cache (memory-side, shared by the 8 XCDs)
        # at 17.2 TB/s peak. The 4 MB L2 of each XCD is private to its 38 CUs: not a tier.
        description="AMD Instinct MI300X (CDNA 3, gfx942, 304 CUs; 8 per platform)",
        peak_flops=_peaks(304, 2.1e9, **_CDNA3), hbm_bytes=192e9, hbm_bytes_per_s=5.3e12,
        ici_bytes_per_s=7 * 128e9 / 2, memory_tiers=((256 * 2**20, 17.2e12),), **_GPU),
    "mi325x": dict(
        # AMD Instinct MI325X data sheet: the MI300X's compute (304 CUs, 2100 MHz; the same
        # printed TFLOPS) with 256 GB HBM3E at 6 TB/s; Infinity Fabric as MI300X.
        description="AMD Instinct MI325X (CDNA 3, gfx942, 304 CUs, HBM3E; 8 per platform)",
        peak_flops=_peaks(304, 2.1e9, **_CDNA3), hbm_bytes=256e9, hbm_bytes_per_s=6.0e12,
        ici_bytes_per_s=7 * 128e9 / 2, **_GPU),
    "mi350x": dict(
        # AMD Instinct MI350X data sheet: 256 CUs, 2200 MHz peak engine clock (air-cooled,
        # 1000 W); FP32 144.2 TFLOPS, FP16/BF16 2.3 PFLOPS, FP8 4.6 PFLOPS, MXFP6/MXFP4 9.2
        # PFLOPS (dense); 288 GB HBM3E at 8 TB/s; 7 Infinity Fabric links, 153.6 GB/s each.
        description="AMD Instinct MI350X (CDNA 4, gfx950, 256 CUs; 8 per platform)",
        peak_flops=_peaks(256, 2.2e9, **_CDNA4), hbm_bytes=288e9, hbm_bytes_per_s=8.0e12,
        ici_bytes_per_s=7 * 153.6e9 / 2, **_GPU),
    "mi355x": dict(
        # AMD Instinct MI355X data sheet: 256 CUs, 2400 MHz peak engine clock (liquid-cooled,
        # 1400 W); FP32 157.3 TFLOPS, FP16/BF16 2.5 PFLOPS (2516.6 TFLOPS), FP8 5.0 PFLOPS,
        # MXFP6/MXFP4 10.1 PFLOPS (dense); 288 GB HBM3E at 8 TB/s; Infinity Fabric as MI350X.
        description="AMD Instinct MI355X (CDNA 4, gfx950, 256 CUs; 8 per platform)",
        peak_flops=_peaks(256, 2.4e9, **_CDNA4), hbm_bytes=288e9, hbm_bytes_per_s=8.0e12,
        ici_bytes_per_s=7 * 153.6e9 / 2, **_GPU),
}
