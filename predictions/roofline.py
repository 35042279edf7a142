"""Rooflines (roofline.md): compute vs memory vs communication time, critical intensities.

``op_time`` turns a per-instruction ``rules.Cost`` into the three roofline terms on a chip;
``matmul`` is the book's X[B,D] . Y[D,F] example; ``critical_intensity`` is alpha = C / W.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from predictions import collectives, dtypes, hardware, levels, topology
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.rules import Cost


def _gpu_or(field: str, gpu_field: str) -> Callable[[Chip], float | None]:
    return lambda c: getattr(c, gpu_field) if c.kind == "gpu" else getattr(c, field)


# Which bandwidth each "over" means. roofline.md: HBM; sharding.md/training.md: bidirectional
# ICI per axis (GPUs: NVLink egress, gpus.md); DCN per chip (GPUs: the node's scale-out egress,
# which gpus.md compares C with); PCIe per chip.
BANDWIDTHS: dict[str, Callable[[Chip], float | None]] = {
    "hbm": lambda c: c.hbm_bytes_per_s,
    "ici": lambda c: c.axis_bytes_per_s,
    "dcn": _gpu_or("dcn_bytes_per_s", "node_bytes_per_s"),
    "pcie": lambda c: c.pcie_bytes_per_s,
}


def bandwidth(chip: Chip | str, over: str = "hbm") -> float:
    """Bytes/s of the link named by ``over`` (hbm, ici, dcn, pcie)."""
    c = hardware.chip_entry(chip)
    if over not in BANDWIDTHS:
        raise ValueError(f"unknown link {over!r}; choose one of {', '.join(BANDWIDTHS)}")
    w = BANDWIDTHS[over](c)
    if not w:
        have = [name for name, ch in hardware.CHIPS.items() if BANDWIDTHS[over](ch)]
        raise ValueError(f"the book gives no {over} bandwidth for {c.name}; "
                         f"chips with one: {', '.join(have)}")
    return w


def critical_intensity(chip: Chip | str, dtype: str = "bf16", over: str = "hbm") -> float:
    """alpha = C / W in FLOPs per byte (roofline.md); over="ici" uses bidirectional per-axis W."""
    c = hardware.chip_entry(chip)
    return c.flops_per_s(dtype) / bandwidth(c, over)  # roofline.md: critical intensity C/W


OVERHEAD = "overhead"  # an op whose fixed cost per execution outweighs its roofline terms


def _bound(terms: dict[str, float]) -> str:
    return max(terms, key=terms.get)  # ties go to the first term (compute)


@dataclass(frozen=True)
class MatmulEstimate:
    """roofline.md: the terms of one matmul X[B,D] . W[D,F] -> Z[B,F] on one chip."""

    flops: float
    bytes: float
    t_compute_s: float
    t_memory_s: float
    t_lower_s: float
    t_upper_s: float
    bound: str
    intensity: float
    critical_intensity: float


def matmul(B: float, D: float, F: float, chip: Chip | str, dtype: str = "bf16",
           weight_dtype: str | None = None) -> MatmulEstimate:
    """Roofline of X[B,D] . W[D,F]; activations and output in ``dtype`` (the compute dtype),
    weights in ``weight_dtype`` (default ``dtype``)."""
    c = hardware.chip_entry(chip)
    for name, v in (("B", B), ("D", D), ("F", F)):
        positive(name, v)
    s_x = dtypes.nbytes(dtype)  # bytes per element (predictions.dtypes)
    s_w = dtypes.nbytes(weight_dtype or dtype)
    flops = 2 * B * D * F  # roofline.md: 2BDF FLOPs
    nbytes = s_x * B * D + s_w * D * F + s_x * B * F  # roofline.md: s_x*BD + s_w*DF + s_out*BF
    t_c = flops / c.flops_per_s(dtype)  # roofline.md: T_math = FLOPs / C
    t_m = nbytes / c.hbm_bytes_per_s  # roofline.md: T_comms = bytes / W_hbm
    return MatmulEstimate(
        flops=flops, bytes=nbytes, t_compute_s=t_c, t_memory_s=t_m,
        t_lower_s=max(t_c, t_m),  # roofline.md: lower bound, perfect overlap
        t_upper_s=t_c + t_m,  # roofline.md: upper bound, no overlap
        bound="compute" if t_c >= t_m else "memory", intensity=flops / nbytes,
        critical_intensity=critical_intensity(c, dtype, "hbm"))


@dataclass(frozen=True)
class OpTime:
    """Roofline terms of one instruction; ``predicted_s`` = max of the three (book: T_lower)."""

    t_compute_s: float
    t_memory_s: float
    t_comm_s: float
    predicted_s: float
    bound: str  # "compute" | "memory" | "comm" | "overhead" | "unmodeled"


UNMODELED_TIME = OpTime(0.0, 0.0, 0.0, 0.0, "unmodeled")


def comm_time(cost: Cost, chip: Chip | str, system=None) -> float:
    """Seconds of a cost's collective on ``chip`` over ``cost.group_axes``; with ``system`` (a
    ``predictions.network`` System or name), at the network levels its ``cost.groups`` cross
    (gpus.md, training.md; ``predictions.levels``: a permute keeps the torus/ring model)."""
    if not cost.comm_bytes or not cost.collective:
        return 0.0
    if cost.collective != "collective-permute" and math.prod(cost.group_axes) == 1:
        return 0.0  # a group of one device moves nothing
    if system is not None and cost.collective in levels.PRICED:
        return levels.estimate(cost.collective, cost.comm_bytes, cost.group_axes, system,
                               groups=cost.groups).seconds
    if cost.collective not in collectives.TIME_BY_COLLECTIVE:
        raise ValueError(f"unknown collective {cost.collective!r}; "
                         f"known: {', '.join(collectives.TIME_BY_COLLECTIVE)}")
    axes = topology.physical_axes(chip, cost.group_axes or (1,))
    return collectives.TIME_BY_COLLECTIVE[cost.collective](cost.comm_bytes, axes, chip)


# Peak columns an element type runs at before its own: f32 at the tensor units' tf32 rate where
# a chip lists one (XLA's default precision runs f32 dots as tf32 on NVIDIA Ampere and later;
# the chip's fp32 figure is its CUDA-core rate), a lower bound either way.
FASTER_COLUMNS: dict[str, tuple[str, ...]] = {"fp32": ("tf32",)}


def host_time(cost: Cost, chip: Chip | str) -> float | None:
    """Seconds of a cost's bytes over the host link (PCIe), 0 when it moves none; None when the
    chip has no host-link figure."""
    if not cost.host_bytes:
        return 0.0
    w = hardware.chip_entry(chip).pcie_bytes_per_s
    # roofline.md: T_comms = bytes / W for the link the bytes cross; W_pcie per chip (tpus.md)
    return cost.host_bytes / w if w else None


def peak_flops(chip: Chip | str, dtype: str) -> float:
    """C for an op of element type ``dtype``; for types the book gives no peak for (fp32 and
    integers on TPUs/GPUs, pred) it falls back to fp32 where listed, else the bf16 peak (an
    optimistic lower bound: TPUs run f32 matmuls as bf16 passes by default). f32 takes tf32
    first where the chip lists it (``FASTER_COLUMNS``)."""
    c = hardware.chip_entry(chip)
    for candidate in (dtype, "fp32", "bf16"):
        column = dtypes.peak_column(candidate)
        for key in (*FASTER_COLUMNS.get(column, ()), column):
            if key in c.dtypes:
                return c.flops_per_s(key)
    return c.flops_per_s("bf16")


def memory_bandwidth(chip: Chip | str, nbytes: float) -> float:
    """W for an op moving ``nbytes``: the bandwidth of the smallest memory tier those bytes fit
    in (``Chip.memory_tiers``: a GPU's L2, a CPU's caches), else W_hbm. roofline.md prices every
    byte at HBM bandwidth; an op whose whole working set stays in a cache nearer the cores is
    bounded by that cache instead, and priced at HBM it would run "above its roofline".

    "Fit" is judged on ``nbytes``, the op's bytes moved (operands read plus results written, as
    ``op_time`` passes them), not on its distinct footprint: an op that reads each byte once (an
    elementwise fusion, a copy) moves exactly its footprint, and one that re-reads a small input
    moves more than it holds, so it is priced at HBM sooner, never later. Fitting is necessary,
    not sufficient: whether the operands are still in the cache depends on what ran before
    (H100: an add of two bf16[8192,768] a GEMM has just written, 3 x 12.6 MB, ran at 3.7 TB/s
    where HBM gives 3.35). The roofline is a lower bound, so it takes the faster memory
    wherever the bytes could all sit in it; an op that found its inputs in HBM then shows a
    lower efficiency (by at most W_hbm / W_tier) rather than one above 100%."""
    c = hardware.chip_entry(chip)
    for capacity, bytes_per_s in c.memory_tiers:
        if nbytes <= capacity:
            return bytes_per_s
    return c.hbm_bytes_per_s


def kernel_rate(chip: Chip | str, kernel: str, dtype: str, flops: float) -> float | None:
    """C of one matmul kernel (``Chip.kernel_flops``) for an execution of ``flops`` FLOPs:
    linear in log(rate) over log(size) between the measured sizes, the nearest measured rate
    beyond them; None when the chip has no rate for ``kernel`` at ``dtype``'s column."""
    c = hardware.chip_entry(chip)
    column = dtypes.peak_column(dtype) or str(dtype).lower()
    points = next((p for k, d, p in c.kernel_flops if (k, d) == (kernel, column)), None)
    if not points:
        return None
    if flops <= points[0][0]:
        return points[0][1]
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if flops <= s1:
            w = math.log(flops / s0) / math.log(s1 / s0)
            return math.exp((1 - w) * math.log(r0) + w * math.log(r1))
    return points[-1][1]


def op_time(cost: Cost, chip: Chip | str, dtype: str = "bf16",
            flops_per_s: float | None = None, system=None) -> OpTime:
    """roofline.md: T_math = FLOPs/C, T_hbm = bytes/W_hbm, T_comm by sharding.md (plus bytes
    over the host link / W_pcie); max of them. Unmodeled when the chip lacks the link's figure.
    ``flops_per_s``: C when the op's own kernel has a rate (``kernel_rate``), else the chip's
    peak at ``dtype``. ``system``: price collectives at the network levels they cross
    (``comm_time``)."""
    c = hardware.chip_entry(chip)
    t_host = host_time(cost, c)
    if not cost.modeled or t_host is None:
        return UNMODELED_TIME
    C = flops_per_s or peak_flops(c, dtype)
    terms = {
        "compute": cost.flops / C if cost.flops else 0.0,  # roofline.md: T_math = FLOPs / C
        "memory": cost.hbm_bytes / memory_bandwidth(c, cost.hbm_bytes),
        "comm": comm_time(cost, c, system) + t_host,
    }
    return combine(terms["compute"], terms["memory"], terms["comm"], c.op_overhead_s)


def combine(t_compute_s: float, t_memory_s: float, t_comm_s: float,
            overhead_s: float = 0.0) -> OpTime:
    """roofline.md's T_lower = max(T_math, T_hbm, T_comm), plus the chip's fixed cost per op
    execution (``Chip.op_overhead_s``: measured on CPU hosts, 0 on the book's chips). The bound
    is the largest term, or ``"overhead"`` when the fixed cost outweighs all three."""
    terms = {"compute": t_compute_s, "memory": t_memory_s, "comm": t_comm_s}
    top = max(terms.values())
    bound = OVERHEAD if overhead_s > top else _bound(terms)
    return OpTime(t_compute_s, t_memory_s, t_comm_s, top + overhead_s, bound)
