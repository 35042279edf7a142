"""A collective priced at the network levels its groups span (gpus.md "Cross-node collectives",
training.md "Scaling Across Pods").

The groups are device ids (from an HLO's replica groups, or ``mesh_groups`` of a mesh's axes);
``placement`` puts device ``d`` in slot ``placement[d]`` of the system (default: slot ``d``),
and slot ``s`` sits in unit ``s // span`` of each level: devices fill NVLink nodes (or TPU
slices) in order, as jax's meshes lay a mesh's last axis inside a node. Per level ``i``:

- D_i: on the innermost level, the group's members in one unit (its NVLink ring or ICI torus);
  above it, the child units the group spans in all (gpus.md: "a ring reduction over every node
  in the cluster");
- G_i: the groups whose members share one child's uplink (gpus.md Pop Quiz 3: with the inner
  axis filling a node, the node's 400 GB/s serves 8 outer-axis groups at once, 50 GB/s each).

Formulas, V = ``nbytes`` (the ``predictions.collectives`` convention):
- AllGather / ReduceScatter: T = V * max_i G_i (D_i - 1) / (D_i W_i)  (gpus.md, per level);
- AllReduce: 2x that (ring), over ``System.sharp.speedup`` with SHARP (gpus.md); on TPU slices
  the hierarchical sum: ReduceScatter in the slice + AllReduce over DCN + AllGather back;
- AllToAll: innermost V (m - 1)/(n^2 W_0), above it G V (D - 1)/(D^2 W_i) (gpus.md: across M
  nodes V (M - 1)/(M^2 W_node)).
TPU levels of kind "ici" are priced on the torus by ``predictions.collectives.estimate``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from predictions import collectives, network, topology
from predictions.network import Level, System

Groups = Sequence[Sequence[int]]
PRICED = collectives.KINDS  # every kind ``collectives.estimate`` prices has its level formula


@dataclass(frozen=True)
class Crossing:
    """One level a group crosses: D children, G groups per child's uplink, its term (s)."""

    level: str
    D: int
    G: int
    bytes_per_s: float
    t_s: float


@dataclass(frozen=True)
class LevelTime:
    """A collective over the levels it crosses; ``binding`` names the level that sets it."""

    kind: str
    system: str
    nbytes: float
    group_size: int
    crossings: tuple[Crossing, ...]
    t_bandwidth_s: float
    t_latency_s: float
    binding: str
    formula: str

    @property
    def seconds(self) -> float:
        return max(self.t_bandwidth_s, self.t_latency_s)  # sharding.md: max(latency, V/W)

    @property
    def bound(self) -> str:
        return "latency" if self.t_latency_s > self.t_bandwidth_s else "bandwidth"


def mesh_groups(dims: Sequence[int], axes: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The device groups of a collective over mesh axes ``axes`` (indices into ``dims``) of a
    row-major mesh (device id = its flat index): mesh (X=4, Y=2), axes (0,) ->
    {0,2,4,6} {1,3,5,7}."""
    dims, axes = tuple(dims), tuple(axes)
    if any(a < 0 or a >= len(dims) for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} are not distinct indices of the mesh {dims}")
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    outer = [k for k in range(len(dims)) if k not in axes]
    groups = []
    for o in itertools.product(*(range(dims[k]) for k in outer)):
        base = sum(i * strides[k] for i, k in zip(o, outer))
        groups.append(tuple(base + sum(i * strides[k] for i, k in zip(inner, axes))
                            for inner in itertools.product(*(range(dims[k]) for k in axes))))
    return tuple(groups)


def _unit(slot: int, span: int) -> int:
    return slot // span if span else 0


def crossings(groups: Groups, sys: System, placement: Sequence[int] | None = None
              ) -> list[tuple[Level, int, int]]:
    """(level, D_i, G_i) for every level the groups cross (D_i > 1), innermost first."""
    groups = [tuple(g) for g in groups if len(g) > 1]
    if not groups:
        return []
    slot = (lambda d: placement[d]) if placement is not None else (lambda d: d)
    out, child = [], 1
    for i, lv in enumerate(sys.levels):
        if i == 0:  # members of one group inside one unit of the innermost level
            D = max(max(_counts([_unit(slot(d), lv.span) for d in g]).values()) for g in groups)
            G = 1
        else:       # child units (of size ``child``) spanned, and groups per child
            D = max(len({_unit(slot(d), child) for d in g}) for g in groups)
            per_child: dict[int, set[int]] = {}
            for k, g in enumerate(groups):
                for d in g:
                    per_child.setdefault(_unit(slot(d), child), set()).add(k)
            G = max(len(s) for s in per_child.values())
        if D > 1:
            out.append((lv, D, G))
        child = lv.span or child
    return out


def _counts(items) -> dict:
    c: dict = {}
    for x in items:
        c[x] = c.get(x, 0) + 1
    return c


def _ici(kind: str, V: float, D: int, sys: System) -> float:
    # sharding.md on the slice's torus: the in-slice members laid onto its physical axes
    return collectives.estimate(kind, V, topology.physical_axes(sys.chip, (D,)), sys.chip).seconds


def _gather_term(lv: Level, D: int, G: int, V: float, sys: System) -> float:
    if lv.kind == "ici":
        return _ici("all-gather", V, D, sys)
    return V * G * (D - 1) / (D * lv.bytes_per_s)  # gpus.md: V (D_i - 1)/(D_i W_i), G per uplink


def _a2a_term(lv: Level, D: int, G: int, V: float, n: int, first: bool, sys: System) -> float:
    if lv.kind == "ici":  # the in-slice block of the exchange, V (D/n)^2, on the torus
        return _ici("all-to-all", V * D * D / (n * n), D, sys)
    if first:  # gpus.md: in-node AllToAll V (N - 1)/(N^2 W_gpu), N the members in the node
        return V * (D - 1) / (n * n * lv.bytes_per_s)
    return V * G * (D - 1) / (D * D * lv.bytes_per_s)  # gpus.md: V (M - 1)/(M^2 W_node)


def _hops(cross, sys: System) -> float:
    # assumption (as predictions.collectives): one hop latency per ring step on switched levels;
    # the book gives no DCN latency, so none is charged for it
    return sys.chip.hop_latency_s * sum(D - 1 for lv, D, _ in cross if lv.kind == "switch")


def _terms(kind: str, V: float, n: int, cross, sys: System) -> list[float]:
    if kind == "all-to-all":
        return [_a2a_term(lv, D, G, V, n, lv is sys.levels[0], sys) for lv, D, G in cross]
    return [_gather_term(lv, D, G, V, sys) for lv, D, G in cross]


def _combine(kind: str, terms: list[float], cross, sys: System) -> tuple[float, str]:
    if kind != "all-reduce":
        return max(terms), "V*max_i G_i(D_i-1)/(D_i*W_i)" if kind != "all-to-all" else \
            "V*max_i G_i(D_i-1)/(D_i^2*W_i)"
    if any(lv.kind == "dcn" for lv, _, _ in cross):
        # training.md / issue: ReduceScatter in the slice, AllReduce over DCN, AllGather back
        return 2 * sum(terms), "RS_ici + AR_dcn + AG_ici = 2*sum_i T_i"
    speedup = sys.sharp.speedup if sys.sharp else 1.0  # gpus.md: SHARP, theory 2x, measured 1.3x
    note = f" / SHARP {speedup:g} ({sys.sharp.basis})" if sys.sharp else ""
    return 2 * max(terms) / speedup, "2*V*max_i G_i(D_i-1)/(D_i*W_i)" + note


def price(kind: str, nbytes: float, groups: Groups, sys: System | str,
          placement: Sequence[int] | None = None) -> LevelTime:
    """``kind`` ("all-gather" | "reduce-scatter" | "all-reduce" | "all-to-all") of ``nbytes``
    over ``groups`` on ``sys``, at the levels the groups cross (module docstring)."""
    s = network.system(sys)
    if kind not in PRICED:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(PRICED)}")
    if not math.isfinite(nbytes) or nbytes <= 0:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes!r}")
    n = max((len(g) for g in groups), default=1)
    if s.levels[-1].span and any(d >= s.levels[-1].span for g in groups for d in g):
        raise ValueError(f"device ids beyond the {s.levels[-1].span} chips of {s.name}")
    cross = crossings(groups, s, placement)
    if not cross:
        return LevelTime(kind, s.name, nbytes, n, (), 0.0, 0.0, "", "group of 1: no communication")
    terms = _terms(kind, nbytes, n, cross, s)
    t_bw, formula = _combine(kind, terms, cross, s)
    at = tuple(Crossing(lv.name, D, G, lv.bytes_per_s, t) for (lv, D, G), t in zip(cross, terms))
    binding = max(at, key=lambda c: c.t_s).level
    t_lat = _hops(cross, s) * (2 if kind == "all-reduce" else 1)
    return LevelTime(kind, s.name, nbytes, n, at, t_bw, t_lat, binding, formula)




def seconds_per_byte(groups: Groups, sys: System | str, outer_only: bool = False,
                     placement: Sequence[int] | None = None) -> tuple[float, str]:
    """(T/V of an AllGather over ``groups``, the level that sets it): the 1/W_collective of
    gpus.md's thresholds. ``outer_only``: past the innermost level only (the book's thresholds
    price a group that leaves its node with node egress alone); 0 if it crosses none."""
    s = network.system(sys)
    cross = crossings(groups, s, placement)
    if outer_only:
        cross = [c for c in cross if c[0] is not s.levels[0]]
    if not cross:
        return 0.0, ""
    terms = _terms("all-gather", 1.0, max(len(g) for g in groups), cross, s)
    k = max(range(len(terms)), key=terms.__getitem__)
    return terms[k], cross[k][0].name


def estimate(kind: str, nbytes: float, axes, system: System | str,
             groups: Groups | None = None, placement: Sequence[int] | None = None
             ) -> collectives.CollectiveTime:
    """``collectives.estimate``'s terms of one collective priced at the network levels its
    ``groups`` (device ids; default one group of prod(axes) devices 0.. in order, packed into
    nodes) cross on ``system``, ``placement`` putting device d in slot placement[d] (gpus.md's
    per-level formulas; TPU slices over DCN)."""
    s = network.system(system)
    ax = collectives.parse_axes(axes) if axes is not None else (max(len(g) for g in groups),)
    t = price(kind, nbytes, groups or (tuple(range(math.prod(ax))),), s, placement)
    where = ", ".join(f"{c.level}: D={c.D} G={c.G}" for c in t.crossings)
    return collectives.CollectiveTime(kind, s.chip.name, t.nbytes, ax, tuple(True for _ in ax),
                                      t.t_bandwidth_s, t.t_latency_s,
                                      f"{t.formula} [{where}] on {s.name}")
