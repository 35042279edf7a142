"""The cluster as levels (gpus.md, tpus.md, training.md): which links a collective's bytes cross
past one GPU node or one TPU slice, and how fast.

A ``System`` is a chip and its network as ``Level``s, innermost first. Level ``i`` joins the
units of level ``i - 1`` (level 0 joins chips) into units of ``span`` chips, each child egressing
at ``bytes_per_s`` (the book's W_i): a GPU's NVLink egress inside a node, a node's scale-out
egress inside a scalable unit, a scalable unit's uplinks at the spine. TPU systems are slices
(``ici``, priced on the torus by ``predictions.collectives``) joined by DCN (per-chip DCN egress x
chips per slice). SHARP (in-network reduction) is a field of the system: its AllReduce speedup,
"theory" (2x) or "measured" (1.3x), said which (gpus.md).

``SYSTEMS`` is the registry (``system(name)`` looks one up); ``DEFAULT_SYSTEMS`` names the
network a chip's thresholds assume past one node; ``tpu_slices`` builds a multi-slice system.

Choices where the book disagrees with itself (docs/networks.md):
- spine bandwidth per SU: 12.8e12 B/s (gpus.md "Cross-node collectives", 8*16*2*400 Gbps), not
  Quiz 4 Q4's 25.6e12 (the switch figure) nor the appendix's 25 GB/s per GPU;
- H800: the book's NVLink 300e9 B/s and H100 FLOPs (its DP threshold 990e12/300e9 = 3300); the
  scale-out is DeepSeek-V3's (arXiv 2412.19437 §3.1: one 400 Gbps IB NIC per GPU, 50 GB/s).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from predictions import hardware
from predictions.hardware import Chip


@dataclass(frozen=True)
class Level:
    """One level of the network: units of ``span`` chips (0: the whole system, no limit) whose
    children each egress at ``bytes_per_s`` (one direction). ``child``: what a child is
    ("GPU", "node", "SU", "slice"); ``kind``: "switch" (gpus.md's ring per level), "ici" (the TPU
    torus, sharding.md) or "dcn" (training.md). ``source``: where the numbers come from."""

    name: str
    span: int
    bytes_per_s: float
    child: str
    kind: str = "switch"
    source: str = ""


@dataclass(frozen=True)
class Sharp:
    """In-network reduction (gpus.md "In network reductions"): an AllReduce takes
    ``1 / speedup`` of the ring's time; ``basis`` "theory" (bytes/W, 2x) or "measured"."""

    speedup: float
    basis: str
    source: str


SHARP: dict[str, Sharp] = {
    # gpus.md: T_SHARP AR = bytes / W_gpu, against the ring's 2 * bytes / W: 2x in theory
    "theory": Sharp(2.0, "theory", "gpus.md: T = bytes/W_egress, half the ring AllReduce"),
    # gpus.md: "in practice we see about a 30% increase in bandwidth" (NCCL 2.27.5, 8xH100)
    "measured": Sharp(1.3, "measured", "gpus.md: ~30% more AllReduce bandwidth, ~480 GB/s"),
}


@dataclass(frozen=True)
class System:
    """A chip and its network, levels innermost first; ``sharp`` None = SHARP off."""

    name: str
    chip: Chip
    levels: tuple[Level, ...]
    description: str
    sharp: Sharp | None = None

    @property
    def domain(self) -> int:
        """Chips in one unit of the innermost level: the NVLink domain, or the TPU slice."""
        return self.levels[0].span

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(f"{self.name} has no level {name!r}; it has "
                       f"{', '.join(lv.name for lv in self.levels)}")


def _fat_tree(gpu_egress: float, node_gpus: int, node_egress: float, nvlink: str,
              scale_out: str) -> tuple[Level, ...]:
    """gpus.md's DGX SuperPod: node (NVLink) -> leaf = SU of 32 nodes -> spine = 4 SUs -> core.
    Above the leaf the tree has full bisection: a unit's uplink = its GPUs x the per-GPU share
    of node egress (gpus.md: SU 12.8 TB/s, SuperPod 51.2 TB/s); the core layer past 1024 GPUs is
    the book's "bigger clusters add a core layer", assumed full bisection too."""
    per_gpu = node_egress / node_gpus
    su, pod = 32 * node_gpus, 4 * 32 * node_gpus
    return (Level("node", node_gpus, gpu_egress, "GPU", source=nvlink),
            Level("leaf", su, node_egress, "node", source=scale_out),
            Level("spine", pod, su * per_gpu, "SU",
                  source="gpus.md: spine D=4 SUs at 12.8 TB/s (8*16*2*400 Gbps)"),
            Level("core", 0, pod * per_gpu, "SuperPod",
                  source="assumption: full bisection above the spine (gpus.md: a core layer)"))


_H100_NET = "gpus.md: NVLink 4, 18 links x 25 GB/s = 450 GB/s per GPU, 8 GPUs per node"
_IB = "gpus.md: 8 x 400 Gbps ConnectX-7 per node = 400 GB/s; SU of 32 nodes (256 GPUs)"

# H800 (gpus.md: DeepSeek's GPU): the book gives NVLink 300 GB/s and prices it with H100's
# 990e12 bf16 FLOP/s (DP threshold 990e12 / 300e9 = 3300); fp8 1.513e15 dense (book's figure).
H800: Chip = dataclasses.replace(
    hardware.CHIPS["h100"], name="h800", ici_bytes_per_s=300e9,
    description="NVIDIA H800 (Hopper for China: NVLink 300 GB/s, gpus.md)",
    peak_flops=tuple((d, 1.513e15 if d in ("fp8", "int8") else f)
                     for d, f in hardware.CHIPS["h100"].peak_flops))

SYSTEMS: dict[str, System] = {
    "dgx-h100-superpod": System(
        "dgx-h100-superpod", hardware.CHIPS["h100"],
        _fat_tree(450e9, 8, 400e9, _H100_NET, _IB),
        "DGX H100 SuperPod: 8-GPU NVLink nodes, InfiniBand fat tree (SU 256, pod 1024 GPUs)"),
    "dgx-h200-superpod": System(
        "dgx-h200-superpod", hardware.CHIPS["h200"],
        _fat_tree(450e9, 8, 400e9, "gpus.md: H200 NVLink as the Hopper row", _IB),
        "DGX H200: the H100 SuperPod's network (gpus.md gives H200 no network of its own)"),
    "h800-cluster": System(
        "h800-cluster", H800,
        _fat_tree(300e9, 8, 400e9, "gpus.md: H800 NVLink 300 GB/s",
                  "DeepSeek-V3 (arXiv 2412.19437 §3.1): 400 Gbps IB per GPU, 8 per node"),
        "DeepSeek's H800 cluster: 8-GPU nodes at 300 GB/s NVLink, IB fat tree"),
    "dgx-b200": System(
        "dgx-b200", hardware.CHIPS["b200"],
        _fat_tree(900e9, 8, 400e9, "gpus.md: NVLink 5, 900 GB/s per GPU, 8 GPUs per node",
                  "gpus.md Quiz 5 Q1: B200 DGX SuperPod scale-out 400 GB/s per node (NVIDIA "
                  "DGX SuperPod B200 reference architecture)"),
        "DGX B200 SuperPod: 8-GPU NVLink 5 nodes, same 400 GB/s scale-out as H100"),
    "gb200-nvl72": System(
        "gb200-nvl72", hardware.CHIPS["b200"],
        (Level("node", 72, 900e9, "GPU",
               source="gpus.md: GB200 NVL72, 72 GPUs in one NVLink domain, 900 GB/s each"),
         Level("leaf", 576, 3.6e12, "node",
               source="gpus.md appendix A: 4*18*400 Gbps / 8 = 3.6 TB/s per NVL72 node"),
         Level("spine", 0, 576 * 3.6e12 / 72, "SuperPod",
               source="assumption: full bisection above the 576-GPU GB200 SuperPod")),
        "GB200 NVL72 racks (2 B200 + 1 Grace per board), 3.6 TB/s node egress"),
}

# the network a chip's thresholds assume past one node (a100: the book gives no scale-out)
DEFAULT_SYSTEMS: dict[str, str] = {"h100": "dgx-h100-superpod", "h200": "dgx-h200-superpod",
                                   "b200": "dgx-b200", "h800": "h800-cluster"}


def system(name: System | str) -> System:
    """A System passes through; a name is looked up (KeyError lists the known systems)."""
    if isinstance(name, System):
        return name
    try:
        return SYSTEMS[str(name).lower()]
    except KeyError:
        raise KeyError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)} (TPU slices: "
                       f"predictions.network.tpu_slices)") from None


def default_system(chip: Chip | str) -> System | None:
    """The network the book prices ``chip``'s GPUs in past one node; None for TPUs and CPUs
    (their slices are sized by ``tpu_slices``) and GPUs with no scale-out figure."""
    c = hardware.chip_entry(chip)
    name = DEFAULT_SYSTEMS.get(c.name)
    return dataclasses.replace(SYSTEMS[name], chip=c) if name else None


def with_sharp(sys: System | str, basis: str | None = "measured") -> System:
    """The system with SHARP on at ``basis`` ("theory" | "measured"), or off (None)."""
    s = system(sys)
    if basis is not None and basis not in SHARP:
        raise ValueError(f"unknown SHARP basis {basis!r}; known: {', '.join(SHARP)}")
    return dataclasses.replace(s, sharp=SHARP[basis] if basis else None)


def tpu_slices(chip: Chip | str, slice_chips: int, slices: int = 1) -> System:
    """``slices`` TPU slices of ``slice_chips`` chips joined by DCN (training.md "Scaling Across
    Pods": a slice's DCN bandwidth is its chips x the per-chip DCN egress of tpus.md)."""
    c = hardware.chip_entry(chip)
    if c.kind != "tpu":
        raise ValueError(f"{c.name} is not a TPU; GPU systems: {', '.join(SYSTEMS)}")
    if isinstance(slice_chips, bool) or not isinstance(slice_chips, int) or slice_chips < 1:
        raise ValueError(f"slice_chips must be a positive integer, got {slice_chips!r}")
    if c.max_slice and slice_chips > math.prod(c.max_slice):
        raise ValueError(f"{c.name}'s largest ICI slice has {math.prod(c.max_slice)} chips, "
                         f"got {slice_chips}")
    if not c.dcn_bytes_per_s:
        raise ValueError(f"the book gives no DCN bandwidth for {c.name}")
    return System(f"{c.name}x{slices}-slices", c,
                  (Level("ici", slice_chips, c.ici_bidi_bytes_per_s, "chip", "ici",
                         "tpus.md: ICI torus inside a slice"),
                   Level("dcn", 0, slice_chips * c.dcn_bytes_per_s, "slice", "dcn",
                         f"tpus.md: DCN {c.dcn_bytes_per_s:.3g} B/s per chip x {slice_chips}")),
                  f"{slices} {c.name} slice(s) of {slice_chips} chips over DCN")
