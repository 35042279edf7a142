"""Chips: peak FLOPs, memory and interconnect numbers from the book (SI units).

``CHIPS`` is the registry; ``chip(name)`` looks an entry up, ``chip_for(device)`` maps a JAX
device's ``device_kind`` to one, ``register(chip)`` installs a calibrated entry at run time.
``WRAP_RULES`` says, per rule a chip names, which axes of a slice wrap around (tpus.md).
Values follow the newest edition of the book (tpus.md, gpus.md spec tables); where the book
disagrees with itself the choice is commented on the entry. Figures the book does not give (GPU
fp32/tf32 peaks, host links) come from the vendor's data sheet, cited on the entry; AMD's chips,
which the book does not cover, are in ``predictions.chips_amd``.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from predictions import chips_amd, dtypes

log = logging.getLogger(__name__)

# Any dtype spelling -> the book's peak-FLOP/s column a chip lists it under
# (predictions.dtypes.PEAK_COLUMN itself).
PEAK_COLUMN: dict[str, str] = dtypes.PEAK_COLUMN


@dataclass(frozen=True)
class Chip:
    """One accelerator (per chip / per GPU). Rates are dense peaks, SI units; None: not given.

    ``ici_bytes_per_s``: TPUs, one-way bandwidth of one ICI link; GPUs, NVLink egress per GPU
    (one direction); CPU, the effective collective bandwidth of the placeholder ring model.
    ``torus_dims``: 2 or 3 for TPUs, 0 for a switched GPU network, 1 for the CPU ring.
    ``max_slice``: the largest ICI-connected slice, one size per torus axis (``()`` = no limit).
    ``wrap_rule``: key into ``WRAP_RULES`` (which axes of a slice have wraparound links).
    ``chips_per_node``: TPU chips per host; GPUs per NVLink node.
    ``node_bytes_per_s``: GPUs only, the node's scale-out (InfiniBand) egress.
    ``pcie_bytes_per_s``: the host link (PCIe), one direction, per chip.
    ``software_bytes_per_s``: CPU only, measured rates of work the host does in software, by
    kind (``"convert"``: bf16 <-> f32, which a CPU without bf16 units converts element by
    element); such ops are priced at this rate, not at ``hbm_bytes_per_s``.
    ``op_overhead_s``: CPU only, the measured fixed cost of one op execution (the runtime's
    dispatch, about a microsecond), added to every modeled op's roofline time; 0 for the book's.
    ``memory_tiers``: ``(capacity_bytes, bytes_per_s)`` pairs, smallest capacity first, of the
    memories nearer the cores than HBM (a GPU's L2, a CPU's caches): an op whose bytes fit in a
    tier's capacity is priced at that tier's bandwidth (``predictions.roofline.memory_bandwidth``);
    empty for the book's chips, which price every byte at HBM bandwidth.
    ``kernel_flops``: CPU only, measured matmul rates per kernel, ``(kernel, dtype column,
    ((flops_per_execution, flops_per_s), ...))`` with sizes ascending: a matmul whose compiled
    kernel (``harness.hlo.kernels``) is listed is priced at its own rate for its size
    (``predictions.roofline.kernel_rate``), any other at ``peak_flops``; empty for the book's.
    ``spread``: CPU only, the host cores' fastest over slowest speed while calibrated
    (``harness.chip.spells``): a figure above its roofline by less is within that spread.
    """

    name: str
    kind: str  # "tpu" | "gpu" | "cpu"
    description: str
    peak_flops: tuple[tuple[str, float], ...]
    hbm_bytes: float
    hbm_bytes_per_s: float
    ici_bytes_per_s: float
    ici_links: int
    torus_dims: int
    max_slice: tuple[int, ...]
    wrap_rule: str
    hop_latency_s: float
    chips_per_node: int
    dcn_bytes_per_s: float | None = None
    pcie_bytes_per_s: float | None = None
    node_bytes_per_s: float | None = None
    software_bytes_per_s: tuple[tuple[str, float], ...] = ()
    op_overhead_s: float = 0.0
    memory_tiers: tuple[tuple[float, float], ...] = ()
    kernel_flops: tuple[tuple[str, str, tuple[tuple[float, float], ...]], ...] = ()
    spread: float = 0.0

    def flops_per_s(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s (OP/s for integers) at ``dtype``; KeyError lists the dtypes given."""
        table = dict(self.peak_flops)
        # tf32 and fp6 are peak columns with no element type of their own: asked for by name
        key = dtypes.peak_column(dtype) or str(dtype).lower()
        if key not in table:
            raise KeyError(f"{self.name} has no peak FLOP/s for dtype {dtype!r} in the book; "
                           f"known for this chip: {sorted(table)}")
        return table[key]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.peak_flops)

    @property
    def ici_bidi_bytes_per_s(self) -> float:
        """Both directions of one link (tpus.md: bidirectional = 2 x one-way)."""
        return 2 * self.ici_bytes_per_s

    @property
    def axis_bytes_per_s(self) -> float:
        """What a collective sees along one mesh axis: TPUs the bidirectional link
        (sharding.md), GPUs the NVLink egress (gpus.md), the CPU placeholder its ring bandwidth."""
        return self.ici_bidi_bytes_per_s if self.kind == "tpu" else self.ici_bytes_per_s

    gpus_per_node = property(lambda self: self.chips_per_node)  # the GPU chapter's name


# --- wraparound rules (tpus.md): which axes of a slice wrap ------------------------------------
WrapRule = Callable[[Chip, tuple[int, ...], "tuple[int, ...] | None"], tuple[bool, ...]]


def _wrap_full_axis(chip: Chip, axes: tuple[int, ...], slice_shape) -> tuple[bool, ...]:
    # tpus.md: v5e/v6e pods are one 16x16 torus; an axis wraps only at the pod's full length (16).
    return tuple(n == max(chip.max_slice) for n in axes)


def _wrap_cube(chip: Chip, axes: tuple[int, ...], slice_shape) -> tuple[bool, ...]:
    # tpus.md: v4p/v5p slices of whole 4x4x4 cubes wrap on every axis, sub-cube slices on none
    # (the "multiple of 4 per axis" wording clashes with the no-wrap 2x2x4 slice; whole-cube wins).
    # Without a slice shape, the collective's own axes are taken to be the slice.
    shape = tuple(slice_shape) if slice_shape else axes
    whole_cubes = all(n % 4 == 0 for n in shape)
    return tuple(whole_cubes and n % 4 == 0 for n in axes)


def _wrap_always(chip: Chip, axes: tuple[int, ...], slice_shape) -> tuple[bool, ...]:
    return tuple(True for _ in axes)  # switched networks and the CPU ring: no topology penalty


WRAP_RULES: dict[str, WrapRule] = {"full-axis": _wrap_full_axis, "cube": _wrap_cube,
                                   "always": _wrap_always}


_TPU = dict(kind="tpu", hop_latency_s=1e-6)  # tpus.md: ~1 us per ICI hop, every generation

CHIPS: dict[str, Chip] = {
    "tpu-v3": Chip(
        "tpu-v3", description="TPU v3 (2 TensorCores, exposed as separate devices)",
        peak_flops=(("bf16", 1.4e14), ("int8", 1.4e14)), hbm_bytes=32e9, hbm_bytes_per_s=9.0e11,
        ici_bytes_per_s=1.0e11, ici_links=4, torus_dims=2, max_slice=(32, 32),
        wrap_rule="full-axis",  # assumption: the book gives no v3 rule; like the v5e pod torus
        chips_per_node=8, **_TPU),  # host link: the book gives none (tpus.md table: "-")
    "tpu-v4p": Chip(
        "tpu-v4p", description="TPU v4p (megacore)",
        peak_flops=(("bf16", 2.75e14), ("int8", 2.75e14)),
        hbm_bytes=32e9, hbm_bytes_per_s=1.2e12,  # table value; a tpus.md exercise uses 1.23e12
        ici_bytes_per_s=4.5e10, ici_links=6, torus_dims=3, max_slice=(16, 16, 16),
        # host link (all TPUs): tpus.md table, PCIe per chip, 16 GB/s each way (v6e: 32 GB/s)
        wrap_rule="cube", chips_per_node=4, pcie_bytes_per_s=1.6e10, **_TPU),
    "tpu-v5p": Chip(
        "tpu-v5p", description="TPU v5p (megacore)",
        # table 4.59e14; training.md prose rounds to 4.6e14 and its DCN paragraph uses 4.46e14
        peak_flops=(("bf16", 4.59e14), ("int8", 9.18e14)), hbm_bytes=96e9, hbm_bytes_per_s=2.8e12,
        ici_bytes_per_s=9.0e10, ici_links=6, torus_dims=3, max_slice=(16, 20, 28),
        wrap_rule="cube", chips_per_node=4, dcn_bytes_per_s=6.25e9, pcie_bytes_per_s=1.6e10,
        **_TPU),
    "tpu-v5e": Chip(
        "tpu-v5e", description="TPU v5e (1 TensorCore)",
        peak_flops=(("bf16", 1.97e14), ("int8", 3.94e14)),
        hbm_bytes=16e9, hbm_bytes_per_s=8.2e11,  # newest edition (Feb 2025: 8.1e11)
        ici_bytes_per_s=4.5e10, ici_links=4, torus_dims=2, max_slice=(16, 16),
        wrap_rule="full-axis", chips_per_node=8, dcn_bytes_per_s=3.125e9,
        pcie_bytes_per_s=1.6e10, **_TPU),
    "tpu-v6e": Chip(
        "tpu-v6e", description="TPU v6e Trillium (1 TensorCore)",
        peak_flops=(("bf16", 9.2e14), ("int8", 1.84e15)),  # table; roofline.md prose says 9.1e14
        hbm_bytes=32e9, hbm_bytes_per_s=1.6e12,
        ici_bytes_per_s=9.0e10, ici_links=4, torus_dims=2, max_slice=(16, 16),
        wrap_rule="full-axis", chips_per_node=8, dcn_bytes_per_s=1.25e10,
        pcie_bytes_per_s=3.2e10, **_TPU),
    "tpu-7x": Chip(
        "tpu-7x", description="TPU7x Ironwood (2 TensorCores, no megacore)",
        peak_flops=(("bf16", 2.30e15), ("int8", 4.61e15)), hbm_bytes=192e9, hbm_bytes_per_s=7.4e12,
        ici_bytes_per_s=9.0e10, ici_links=6, torus_dims=3, max_slice=(4, 4, 576),
        wrap_rule="cube",  # assumption: the book states no 7x rule; treated like v5p
        # host link: neither the book (tpus.md table: "-") nor Google's TPU7x page gives one
        chips_per_node=4, dcn_bytes_per_s=1.25e10, **_TPU),
    # gpus.md. hop_latency_s: the book gives no GPU per-hop latency; 1 us is an assumption.
    # fp32 (CUDA cores) and tf32 (Tensor Cores) are the data sheets' dense figures (they print
    # tf32 "with sparsity", twice the dense rate); the host link is PCIe, one direction (the
    # data sheets print both directions together).
    "a100": Chip(
        "a100", kind="gpu", description="NVIDIA A100 (Ampere, NVLink 3, 8 per node)",
        # NVIDIA A100 Tensor Core GPU data sheet (SXM): FP32 19.5, TF32 156 (312 sparse) TFLOPS;
        # PCIe Gen4 64 GB/s. The book's fp8 is its "fp8/int8" column: A100 has int8, no fp8 units.
        peak_flops=(("fp32", 19.5e12), ("tf32", 312e12 / 2), ("bf16", 3.1e14), ("fp8", 6.2e14),
                    ("int8", 6.2e14)),
        hbm_bytes=80e9, hbm_bytes_per_s=2.0e12, ici_bytes_per_s=300e9, ici_links=12,
        torus_dims=0, max_slice=(), wrap_rule="always", hop_latency_s=1e-6, chips_per_node=8,
        pcie_bytes_per_s=64e9 / 2,
        # L2: 40 MB (gpus.md's table); NVIDIA A100 Tensor Core GPU Architecture white paper: L2
        # read bandwidth 5120 bytes/clk (2.3x V100's), x the 1.41 GHz boost clock = 7.2 TB/s
        memory_tiers=((40 * 2**20, 5120 * 1.41e9),)),
    "h100": Chip(
        "h100", kind="gpu", description="NVIDIA H100 SXM (Hopper, NVLink 4, DGX node of 8)",
        # the book computes with 9.89e14 and 3.35e12 (critical batch 295); its table rounds to
        # 9.9e14 and 3.4e12. fp8/int8 = 2x bf16 (table: 2.0e15). NVIDIA H100 Tensor Core GPU
        # data sheet (SXM): FP32 67, TF32 989 sparse (494.5 dense) TFLOPS; PCIe Gen5 128 GB/s.
        peak_flops=(("fp32", 67e12), ("tf32", 989e12 / 2), ("bf16", 9.89e14), ("fp8", 1.978e15),
                    ("int8", 1.978e15)),
        hbm_bytes=80e9, hbm_bytes_per_s=3.35e12, ici_bytes_per_s=450e9, ici_links=18,
        torus_dims=0, max_slice=(), wrap_rule="always", hop_latency_s=1e-6, chips_per_node=8,
        dcn_bytes_per_s=50e9, pcie_bytes_per_s=128e9 / 2, node_bytes_per_s=400e9,
        # L2: gpus.md gives 50 MB, "split in two 25 MB halves, measured ~5.5 TB/s" (Chips and
        # Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023); NVIDIA prints no
        # L2 bandwidth. A cache's MB are binary: 50 MiB.
        memory_tiers=((50 * 2**20, 5.5e12),)),
    "h200": Chip(
        "h200", kind="gpu", description="NVIDIA H200 (Hopper; NVLink as H100)",
        # NVIDIA H200 Tensor Core GPU data sheet (SXM): FP32 67, TF32 989 sparse (494.5 dense)
        # TFLOPS, as H100 SXM; PCIe Gen5 128 GB/s.
        peak_flops=(("fp32", 67e12), ("tf32", 989e12 / 2), ("bf16", 9.89e14), ("fp8", 1.978e15),
                    ("int8", 1.978e15)),
        hbm_bytes=141e9, hbm_bytes_per_s=4.8e12, ici_bytes_per_s=450e9, ici_links=18,
        torus_dims=0, max_slice=(), wrap_rule="always", hop_latency_s=1e-6, chips_per_node=8,
        dcn_bytes_per_s=50e9, pcie_bytes_per_s=128e9 / 2, node_bytes_per_s=400e9,
        # L2 as H100's (gpus.md's table: the same 132 SMs, clocks and 50 MB L2 of one die)
        memory_tiers=((50 * 2**20, 5.5e12),)),
    "b200": Chip(
        "b200", kind="gpu", description="NVIDIA B200 (Blackwell, NVLink 5, DGX node of 8)",
        # calculations use 2.25e15 (critical batch 281); the table says 2.3e15. NVIDIA HGX B200
        # data sheet, 8 GPUs: FP32 600 TFLOPS, TF32 18 and FP8/FP6 72 PFLOPS with sparsity, i.e.
        # per GPU dense 75 TFLOPS, 1.125 and 4.5 PFLOPS. Host link: not taken (no per-GPU figure).
        peak_flops=(("fp32", 600e12 / 8), ("tf32", 18e15 / 8 / 2), ("bf16", 2.25e15),
                    ("fp8", 4.5e15), ("fp6", 72e15 / 8 / 2), ("int8", 4.5e15), ("fp4", 9.0e15)),
        hbm_bytes=192e9, hbm_bytes_per_s=8.0e12, ici_bytes_per_s=900e9, ici_links=18,
        torus_dims=0, max_slice=(), wrap_rule="always", hop_latency_s=1e-6, chips_per_node=8,
        dcn_bytes_per_s=50e9, node_bytes_per_s=400e9),
    # AMD Instinct (not in the book): the vendor's figures, cited in predictions.chips_amd
    **{name: Chip(name, **spec) for name, spec in chips_amd.SPECS.items()},
    # PLACEHOLDER, not from the book: a conservative shared-core host. `harness calibrate`
    # measures the real numbers; a run predicts with them (calibrate.chip.cpu_chip_for_run).
    "cpu": Chip(
        "cpu", kind="cpu", description="host CPU (placeholder until `harness calibrate`)",
        peak_flops=(("fp32", 1e11), ("bf16", 1e11)), hbm_bytes=16e9, hbm_bytes_per_s=2e10,
        ici_bytes_per_s=1e10, ici_links=1, torus_dims=1, max_slice=(), wrap_rule="always",
        hop_latency_s=1e-5, chips_per_node=8),
}


def chip_entry(name: Chip | str) -> Chip:
    """A Chip passes through; a name is looked up (KeyError lists the known names)."""
    if isinstance(name, Chip):
        return name
    try:
        return CHIPS[str(name).lower()]
    except KeyError:
        raise KeyError(f"unknown chip {name!r}; known chips: {', '.join(CHIPS)}") from None


chip = chip_entry


def register(entry: Chip, replace: bool = False) -> Chip:
    """Install ``entry`` under its name (e.g. a calibrated ``cpu``)."""
    if not isinstance(entry, Chip):
        raise ValueError(f"register() takes a Chip, got {type(entry).__name__}")
    if entry.name in CHIPS and not replace:
        raise ValueError(f"chip {entry.name!r} is already registered; pass replace=True")
    if entry.wrap_rule not in WRAP_RULES:
        raise ValueError(f"unknown wrap_rule {entry.wrap_rule!r}; known: {sorted(WRAP_RULES)}")
    CHIPS[entry.name] = entry
    log.info("registered chip %s", entry.name)
    return entry


# device_kind strings as JAX reports them (lower-cased, full match) -> registry name.
DEVICE_KINDS: dict[str, str] = {
    r"tpu v5( ?lite|e)": "tpu-v5e",
    r"tpu v5p?": "tpu-v5p",  # v5p reports itself as "TPU v5"
    r"tpu v4p?": "tpu-v4p",
    r"tpu v6( ?lite|e)": "tpu-v6e",
    r"tpu ?(v7x?|7x)( .*)?": "tpu-7x",
    r"tpu v3.*": "tpu-v3",
    r"(nvidia )?a100.*": "a100",
    r"(nvidia )?h100.*": "h100",
    r"(nvidia )?h200.*": "h200",
    r"(nvidia )?b200.*": "b200",
    r"(amd )?(instinct )?mi300x.*": "mi300x",  # device names such as "AMD Instinct MI300X"
    r"(amd )?(instinct )?mi325x.*": "mi325x",
    r"(amd )?(instinct )?mi350x.*": "mi350x",
    r"(amd )?(instinct )?mi355x.*": "mi355x",
    r"cpu": "cpu",
}


def chip_for(device: object) -> Chip:
    """The registry entry for a JAX device (anything with ``.device_kind``/``.platform``) or a
    ``device_kind`` string. KeyError names the kind and the known chips."""
    kind = device if isinstance(device, str) else getattr(device, "device_kind", None)
    if kind is None:
        raise KeyError(f"{device!r} has no device_kind; known chips: {', '.join(CHIPS)}")
    norm = " ".join(str(kind).lower().split())
    if norm in CHIPS:
        return CHIPS[norm]
    for pattern, name in DEVICE_KINDS.items():
        if re.fullmatch(pattern, norm):
            return CHIPS[name]
    if getattr(device, "platform", None) == "cpu":
        return CHIPS["cpu"]
    raise KeyError(f"no chip entry for device kind {kind!r}; known chips: {', '.join(CHIPS)} "
                   f"(register one with predictions.hardware.register)")
