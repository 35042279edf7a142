"""Collective times: AllGather, ReduceScatter, AllReduce, AllToAll, point-to-point (seconds).

Byte convention (``nbytes``, the book's V): bytes each device holds AFTER an all-gather, BEFORE
a reduce-scatter, of the array being reduced (all-reduce), and of the whole array being
exchanged across the group for an all-to-all (sharding.md's V in V/(4W) is the array an
AllGather of the same data would produce, i.e. group size x the per-device block).
``axes``: sizes of the mesh axes the collective runs over (an int, a sequence or "4x4").
TPUs follow sharding.md (wrapped rings, chains without wraparound, several axes at once);
GPUs follow gpus.md (NVLink inside a node, scale-out beyond); the CPU placeholder is a ring.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from predictions import hardware, topology
from predictions.hardware import Chip
from predictions.mesh import MeshError, parse_dims, parse_mesh

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


@dataclass(frozen=True)
class CollectiveTime:
    """The bandwidth and latency terms of one collective; ``seconds`` is their max."""

    kind: str
    chip: str
    nbytes: float
    axes: tuple[int, ...]
    wraps: tuple[bool, ...]
    t_bandwidth_s: float
    t_latency_s: float
    formula: str

    @property
    def seconds(self) -> float:
        # sharding.md: T = max(T_min * hops, V / W), latency- or bandwidth-bound
        return max(self.t_bandwidth_s, self.t_latency_s)

    @property
    def bound(self) -> str:
        return "latency" if self.t_latency_s > self.t_bandwidth_s else "bandwidth"


def parse_axes(axes: int | str | Sequence[int]) -> tuple[int, ...]:
    """4 -> (4,); "4x4" -> (4, 4); "X=4,Y=4" -> (4, 4); [4, 2] -> (4, 2) (``predictions.mesh``
    parses). ValueError on anything not positive."""
    try:
        if isinstance(axes, str) and "=" in axes:
            return parse_mesh(axes).dims
        if isinstance(axes, float):
            raise MeshError(axes, "not a whole number")
        return parse_dims(axes)
    except MeshError as e:
        raise ValueError(f"axes must be positive integer sizes like 4, 4x4 or X=4,Y=4, got "
                         f"{axes!r} ({e.reason})") from None


def _check_bytes(nbytes: float) -> float:
    if not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) or nbytes <= 0:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes!r}")
    return float(nbytes)


def _tpu(kind: str, V: float, axes: tuple[int, ...], wraps: tuple[bool, ...], c: Chip):
    W1, T_min = c.ici_bytes_per_s, c.hop_latency_s
    W = c.ici_bidi_bytes_per_s
    live = [(n, w) for n, w in zip(axes, wraps) if n > 1]
    # sharding.md: a wrapped axis takes n/2 hops, a chain (no wraparound) n-1; hops add over axes
    hops = sum(n / 2 if w else n - 1 for n, w in live)
    if kind == "all-to-all":
        # sharding.md: V*max(n_i)/(4*N*W) on a wrapped N-D mesh; a chain has half the links across
        # the bisection, so 2x (tpus.md: "without wraparound most collectives take twice as long")
        N = math.prod(n for n, _ in live)
        t_bw = max(V * n / (4 * N * (W if w else W1)) for n, w in live)
        return t_bw, T_min * hops, "V*max(n)/(4*N*W) (W one-way on unwrapped axes)"
    # sharding.md: AllGather on a wrapped ring, V/W (W bidirectional); without wraparound a
    # one-way chain, (n-1)*(V/n)/W1; several axes at once add their bandwidths.
    bw = sum(W if w else W1 * n / (n - 1) for n, w in live)
    t_bw, t_lat = V / bw, T_min * hops
    if kind == "all-reduce":  # sharding.md: AllReduce = ReduceScatter + AllGather, 2V/W
        return 2 * t_bw, 2 * t_lat, "2*V/(n_axes*W)"
    return t_bw, t_lat, "V/(n_axes*W) (W1*n/(n-1) on unwrapped axes)"


def _gpu(kind: str, V: float, axes: tuple[int, ...], wraps, c: Chip):
    N = math.prod(axes)
    d0 = min(N, c.chips_per_node)
    M = math.ceil(N / c.chips_per_node)
    if M > 1 and not c.node_bytes_per_s:
        raise ValueError(f"{c.name}: the book gives no scale-out bandwidth; keep collectives "
                         f"within one node of {c.chips_per_node} GPUs (got {N})")
    levels = [(d0, c.ici_bytes_per_s)] + ([(M, c.node_bytes_per_s)] if M > 1 else [])
    hops = sum(d - 1 for d, _ in levels)  # assumption: one latency per ring step and level
    t_lat = c.hop_latency_s * hops
    if kind == "all-to-all":
        if M == 1:  # gpus.md: in-node AllToAll V*(N-1)/(N^2*W_gpu)
            return V * (N - 1) / (N * N * c.ici_bytes_per_s), t_lat, "V*(N-1)/(N^2*W_gpu)"
        # gpus.md: across M nodes, V*(M-1)/(M^2*W_node)
        return V * (M - 1) / (M * M * c.node_bytes_per_s), t_lat, "V*(M-1)/(M^2*W_node)"
    # gpus.md: AllGather/ReduceScatter T = V * max_i (D_i - 1)/(D_i * W_i) over node/scale-out
    t_bw = V * max((d - 1) / (d * w) for d, w in levels)
    if kind == "all-reduce":  # gpus.md: ring AllReduce is 2x (no SHARP)
        return 2 * t_bw, 2 * t_lat, "2*V*max_i (D_i-1)/(D_i*W_i)"
    return t_bw, t_lat, "V*max_i (D_i-1)/(D_i*W_i)"


def _ring(kind: str, V: float, axes: tuple[int, ...], wraps, c: Chip):
    # Placeholder CPU model: one ring over all N devices at the chip's collective bandwidth.
    N = math.prod(axes)
    W, t_lat = c.ici_bytes_per_s, c.hop_latency_s * (N - 1)
    if kind == "all-to-all":
        return V * (N - 1) / (N * N * W), t_lat, "V*(N-1)/(N^2*W)"
    t_bw = V * (N - 1) / (N * W)
    if kind == "all-reduce":
        return 2 * t_bw, 2 * t_lat, "2*V*(N-1)/(N*W)"
    return t_bw, t_lat, "V*(N-1)/(N*W)"


MODELS: dict[str, Callable] = {"tpu": _tpu, "gpu": _gpu, "cpu": _ring}


def estimate(kind: str, nbytes: float, axes: int | str | Sequence[int], chip: Chip | str,
             wraparound: bool | Sequence[bool] | None = None,
             slice_shape: Sequence[int] | None = None) -> CollectiveTime:
    """All terms of one collective. ``wraparound``: None infers it from the chip's topology
    (optionally from the whole ``slice_shape``), a bool applies to every axis, or one per axis.
    Past one GPU node or TPU slice: ``predictions.levels.estimate`` on a network system."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    c = hardware.chip_entry(chip)
    V = _check_bytes(nbytes)
    ax = topology.check_axes(c, parse_axes(axes))
    if c.kind != "tpu":
        w = tuple(True for _ in ax)
    elif wraparound is None:
        w = topology.wraps(c, ax, slice_shape)
    elif isinstance(wraparound, bool):
        w = tuple(wraparound for _ in ax)
    else:
        w = tuple(bool(x) for x in wraparound)
        if len(w) != len(ax):
            raise ValueError(f"wraparound has {len(w)} entries for {len(ax)} axes {ax}")
    if math.prod(ax) == 1:
        return CollectiveTime(kind, c.name, V, ax, w, 0.0, 0.0, "group of 1: no communication")
    t_bw, t_lat, formula = MODELS[c.kind](kind, V, ax, w, c)
    return CollectiveTime(kind, c.name, V, ax, w, t_bw, t_lat, formula)


def all_gather(nbytes, axes, chip, wraparound=None) -> float:
    """Seconds; ``nbytes`` per device after the gather."""
    return estimate("all-gather", nbytes, axes, chip, wraparound).seconds


def reduce_scatter(nbytes, axes, chip, wraparound=None) -> float:
    """Seconds; ``nbytes`` per device before the scatter (the unreduced array)."""
    return estimate("reduce-scatter", nbytes, axes, chip, wraparound).seconds


def all_reduce(nbytes, axes, chip, wraparound=None) -> float:
    """Seconds; ``nbytes`` of the array being reduced."""
    return estimate("all-reduce", nbytes, axes, chip, wraparound).seconds


def all_to_all(nbytes, axes, chip, wraparound=None) -> float:
    """Seconds; ``nbytes`` of the whole array exchanged across the group."""
    return estimate("all-to-all", nbytes, axes, chip, wraparound).seconds


def ppermute_terms(nbytes: float, chip: Chip | str, links: int = 1, hops: int = 1
                   ) -> CollectiveTime:
    """Point-to-point copy over ``links`` links, first byte after ``hops`` hops.

    GPUs: ``ici_bytes_per_s`` is already the GPU's whole NVLink egress, so ``links`` must be 1.
    """
    c = hardware.chip_entry(chip)
    V = _check_bytes(nbytes)
    max_links = c.ici_links if c.kind == "tpu" else 1
    if isinstance(links, bool) or not isinstance(links, int) or not 1 <= links <= max_links:
        raise ValueError(f"links must be an integer in 1..{max_links} for {c.name}, got {links!r}")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise ValueError(f"hops must be a positive integer, got {hops!r}")
    # tpus.md: bytes / (links * one-way W); the first byte arrives after hops * T_min
    return CollectiveTime("collective-permute", c.name, V, (), (), V / (links * c.ici_bytes_per_s),
                          hops * c.hop_latency_s, "V/(links*W_oneway)")


def ppermute(nbytes: float, chip: Chip | str, links: int = 1, hops: int = 1) -> float:
    """Seconds for a point-to-point copy (collective-permute) at one-way link bandwidth."""
    return ppermute_terms(nbytes, chip, links, hops).seconds


# Collective kind (as rules.Cost names it) -> seconds(nbytes, axes, chip); used by roofline.op_time.
TIME_BY_COLLECTIVE: dict[str, Callable[[float, Sequence[int], Chip], float]] = {
    "all-gather": all_gather,
    "reduce-scatter": reduce_scatter,
    "all-reduce": all_reduce,
    "all-to-all": all_to_all,
    "collective-permute": lambda nbytes, axes, chip: ppermute(nbytes, chip),
}


# --- a collective workload's figures: its mesh axes, its bytes --------------------------------
# A workload names the mesh axes it runs over as "X", or "X,Y" / "X+Y" for several at once
# (sharding.md writes AllGather_{XY}); its kinds and their opcodes are workloads.collectives.KINDS.


def axis_names(axes: str) -> tuple[str, ...]:
    """"X" -> ("X",); "X,Y" and "X+Y" -> ("X", "Y"); blanks ignored."""
    return tuple(a.strip() for a in str(axes).replace("+", ",").split(",") if a.strip())


def axis_sizes(axes: str, mesh: Mapping[str, int]) -> tuple[int, ...]:
    """The sizes in ``mesh`` (axis name -> size) of the axes named by ``axes``.
    ValueError naming the mesh's axes for an axis it does not have."""
    names = axis_names(axes)
    unknown = [a for a in names if a not in mesh]
    if unknown or not names:
        raise ValueError(f"axes {axes!r}: no mesh axis {', '.join(unknown) or '(none named)'}; "
                         f"the mesh has {', '.join(map(str, mesh)) or 'no axes'}")
    return tuple(int(mesh[a]) for a in names)


# V in this module's convention (see the module docstring) from b = the input bytes each device
# holds and n = devices in the group (sharding.md's V).
V_OF_INPUT: dict[str, Callable[[float, int], float]] = {
    "all-gather": lambda b, n: b * n,      # V = the gathered output per device
    "reduce-scatter": lambda b, n: b,      # V = the unreduced input per device
    "all-reduce": lambda b, n: b,          # V = the array being reduced
    "all-to-all": lambda b, n: b * n,      # V = the whole array exchanged across the group
    "collective-permute": lambda b, n: b,  # V = the buffer sent to the neighbour
}

# Bytes each device moves over its links in one collective, from the same b and n: the ring
# algorithms of sharding.md (nccl-tests' "bus bytes").
BUS_BYTES: dict[str, Callable[[float, int], float]] = {
    "all-gather": lambda b, n: b * (n - 1),          # receives the n - 1 other shards
    "reduce-scatter": lambda b, n: b * (n - 1) / n,  # passes n - 1 of its n chunks on
    "all-reduce": lambda b, n: 2 * b * (n - 1) / n,  # a reduce-scatter, then an all-gather
    "all-to-all": lambda b, n: b * (n - 1) / n,      # sends away n - 1 of its n chunks
    "collective-permute": lambda b, n: b,            # the whole buffer to one neighbour
}
