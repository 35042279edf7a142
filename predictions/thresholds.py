"""Compute-bound thresholds past one GPU node or TPU slice (gpus.md "Rooflines for LLM Scaling
on GPUs", training.md "Scaling Across Pods", inference.md), at the network level a group crosses.

Placement: the mesh is row-major with its model-parallel axes innermost (``inner`` = TP x PP x EP
devices per data-parallel rank), so they fill a node first, as on the book's clusters. Within one
NVLink domain the book's rules are unchanged (alpha = C / W_gpu, ``predictions.training``); past
it gpus.md prices the group with W_collective = the node egress level, seen through
``predictions.levels``: the (X - 1)/X of small groups, the G outer-axis groups sharing one node's
egress, and an inner axis spanning several nodes dividing the cost (gpus.md Pop Quiz 3, Quiz 5).
The book's own threshold sections drop the NVLink term once a group leaves its node (its Quiz 4
Q5 keeps it: for 2 nodes it binds); these functions follow the threshold sections.
"""
from __future__ import annotations

from dataclasses import dataclass

from predictions import levels, network
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.network import System
from predictions.verdicts import Verdict, _num


@dataclass(frozen=True)
class Alpha:
    """C * (seconds per byte) of one group's collective, in FLOPs per byte (tokens), the level
    that sets it, and whether the group stays inside one NVLink domain / slice."""

    alpha: float
    level: str
    in_domain: bool


def _system(chip: Chip | str | None, system: System | str | None) -> System:
    if system is not None:
        s = network.system(system)
        return s if chip is None else _with_chip(s, chip)
    s = network.default_system(chip) if chip is not None else None
    if s is None:
        raise ValueError(f"no network is registered for {chip!r} past one node; give a system "
                         f"({', '.join(network.SYSTEMS)})")
    return s


def _with_chip(s: System, chip: Chip | str) -> System:
    from dataclasses import replace

    from predictions import hardware
    return replace(s, chip=hardware.chip_entry(chip))


def outer_alpha(system: System | str, X: int, inner: int = 1, dtype: str = "bf16",
                chip: Chip | str | None = None) -> Alpha:
    """alpha of a collective over the outer axis X of a mesh (X, inner) (a DP/FSDP group)."""
    s = _system(chip, system)
    C = s.chip.flops_per_s(dtype)
    groups = levels.mesh_groups((positive("X", X), positive("inner", inner)), (0,))
    return _alpha(s, groups, C)


def inner_alpha(system: System | str, Y: int, dtype: str = "bf16",
                chip: Chip | str | None = None) -> Alpha:
    """alpha of a collective over the innermost axis Y (a TP group: devices 0..Y-1)."""
    s = _system(chip, system)
    return _alpha(s, (tuple(range(positive("Y", Y))),), s.chip.flops_per_s(dtype))


def _alpha(s: System, groups, C: float) -> Alpha:
    t, level = levels.seconds_per_byte(groups, s, outer_only=True)
    if t == 0.0:  # gpus.md: within a node B/X > C/W_gpu (no (N-1)/N, as training.py)
        return Alpha(C / s.levels[0].bytes_per_s, s.levels[0].name, True)
    return Alpha(C * t, level, False)  # gpus.md: W_collective = node egress past a node


def dp_min_tokens(system: System | str | None = None, X: int = 1, inner: int = 1,
                  dtype: str = "bf16", E: float = 1, k: float = 1, strategy: str = "dp",
                  chip: Chip | str | None = None) -> tuple[float, Alpha]:
    """(tokens per data-parallel rank, B/X, above which DP/FSDP stays compute-bound; alpha).

    gpus.md: B/X > (E/k) * C/W_collective (MoE: E experts, k per token); a DP AllReduce with
    SHARP divides it by the system's speedup (FSDP's AllGather/ReduceScatter do not reduce in
    the switch). Per GPU divide by ``inner`` (gpus.md Quiz 5 Q2: 8-way PP -> 309 tokens)."""
    s = _system(chip, system)
    a = outer_alpha(s, X, inner, dtype)
    need = a.alpha * positive("E", E) / positive("k", k)
    if strategy == "dp" and s.sharp is not None:
        need /= s.sharp.speedup  # gpus.md: SHARP halves the DP bound in theory, ~1.3x measured
    return need, a


def max_tp(F: float, system: System | str | None = None, dtype: str = "bf16",
           chip: Chip | str | None = None) -> float:
    """The largest TP degree Y that stays compute-bound (gpus.md "Tensor Parallelism"):
    Y < F * W_gpu / C inside the NVLink domain; a TP group that fills its node and spans
    more keeps F > alpha_node * (Y - D_node) (gpus.md: "F > 2475 (Y - 8)", up to 19-way)."""
    s = _system(chip, system)
    C, D_node = s.chip.flops_per_s(dtype), s.domain
    y_in = positive("F", F) * s.levels[0].bytes_per_s / C
    if y_in < D_node or len(s.levels) < 2:
        return y_in
    # the leaf ring over Y / D_node nodes: F > alpha_node * Y (M-1)/M = alpha_node (Y - D_node)
    return D_node + F * s.levels[1].bytes_per_s / C


def decode_tp_bound(F: float, batch: float, Y: int, system: System | str | None = None,
                    chip: Chip | str | None = None) -> float:
    """inference.md: in decode, communication dominates TP when Y > F / (B * W_hbm / W); past
    the NVLink domain W is the level the TP group crosses (its alpha over C)."""
    s = _system(chip, system)
    a = inner_alpha(s, Y)
    W = s.chip.flops_per_s("bf16") / a.alpha
    return positive("F", F) / (positive("batch", batch) * s.chip.hbm_bytes_per_s / W)


def dcn_min_tokens_per_slice(chip: Chip | str, dtype: str = "bf16") -> float:
    """training.md "Scaling Across Pods": DP over DCN stays compute-bound while the batch per
    ICI slice exceeds C / W_dcn (W_dcn per chip; v5p 4.59e14 / 6.25e9 = 73,440)."""
    sys = network.tpu_slices(chip, 1)
    return sys.chip.flops_per_s(dtype) / sys.chip.dcn_bytes_per_s


def network_verdict(strategy: str, tokens: float, chip: Chip | str, X: int, Y: int,
                    F: float | None = None, dtype: str = "bf16",
                    system: System | str | None = None, inner: int = 1):
    """``predictions.training.Verdict`` for a layout whose chips span more than one NVLink
    domain (gpus.md's thresholds at the level crossed), or None where the book's in-node rules
    apply (TPUs, one node, GPUs with no registered network). ``inner``: further model-parallel
    devices (PP, EP) between the data and the TP axes, mesh (X, inner, Y)."""
    from predictions import hardware

    c = hardware.chip_entry(chip)
    s = _system(c, system) if system is not None or network.default_system(c) else None
    N = X * Y * positive("inner", inner)
    if c.kind != "gpu" or s is None or N <= s.domain:
        return None
    M = Y * inner  # model-parallel devices per data-parallel rank, innermost
    need_x, a = dp_min_tokens(s, X, M, dtype, strategy="dp" if strategy == "dp" else "fsdp")
    if strategy == "tp":
        need = max_tp(positive("F", F), s, dtype)
        ok = Y < need
        return Verdict("tp", Y, need, "compute" if ok else "comm",
                       f"Y={Y} {'<' if ok else '>='} max TP={_num(need)} (past the node: "
                       f"F > alpha_node*(Y - {s.domain}))")
    if strategy == "fsdp_tp":  # per GPU: the FSDP term over M model-parallel GPUs, and TP's
        have, need, what = tokens / N, need_x / M, "B/N"
        tp_ok = F is None or Y < max_tp(F, s, dtype)
    else:
        have, need, what, tp_ok = tokens / X, need_x, "B/X", True
    ok = have > need and tp_ok
    rule = f"C/W at {a.level}" + (f" / {M} model-parallel" if what == "B/N" else "")
    tail = "" if tp_ok else f"; TP Y={Y} >= {_num(max_tp(F, s, dtype))}"
    return Verdict(strategy, have, need, "compute" if ok else "comm",
                   f"{what}={_num(have)} {'>' if have > need else '<='} {rule}={_num(need)}"
                   f"{tail} ({s.name})")
