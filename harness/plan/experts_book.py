"""The book's step and memory of one expert layout of ``harness plan`` (a MoE config), priced
the same way as the flat and pipelined layouts (``harness.plan.pipeline_book``) so that all
rank on one scale.

A layout is a mesh by role, row-major (its last axis inside a node or slice): ``stage`` S,
``data`` and ``fsdp`` (X together: they split the batch), ``expert`` Z (splits the experts and
the batch), ``model`` Y. Its step, per device:

- the replica's compute and TP (``pipeline_book.replica_s``: training.md's per-layer model of
  the active model, ``workloads.llama.config.book_model``, over the B/(X·Z) tokens a rank
  carries), the routed experts' part of it, T_math = 3·2·B·k·3DF·L_moe/(N·C) (transformers.md
  §5.4, a training step 3x the forward), replaced by max(c·T_math, T_a2a): the expert matmuls
  padded to the capacity factor c (dropless: c = 1 at perfect balance) against the two
  all-to-alls of each MoE layer, forward and backward (gpus.md "Expert parallelism", §6.2:
  T_math against T_comms; dispatch and combine each move V = c·(B/X)·k·D·2 bytes over the
  expert group, ``predictions.moe.all_to_all`` at the network level the group crosses);
- the gradient reduction: the non-expert weights' 2·P_rest/(S·Y) bytes over every axis that
  splits the batch (data, fsdp, expert), the routed experts' 2·P_routed·(1/Z)/(S·Y) over data
  and fsdp only (each expert lives on one expert rank); overlapped with the passes as
  ``pipeline_book.FLAT_STEP`` (DP: in the backward; FSDP: gathers in both passes);
- pipelined (``stage`` > 1): the stage's work stretched by the bubble and the reduction
  exposed but for the last microbatch's backward (``predictions.pipeline.pipelined_step``).

Memory per device (training.md §6.3): bf16 weights and gradients and fp32 AdamW moments, 10
bytes a parameter, the routed experts over expert x fsdp x model x stage and the rest over
fsdp x model x stage (``predictions.moe.weight_bytes_per_device``); pipelined, ZeRO-1 (moments
also over the data replicas); the checkpoints 2·D·(B/(X·Z))·n_ckpt·L/(S·Y) (the schedule's
held microbatches when pipelined); one MoE layer's dispatch buffers, sent and received,
2·V/Z.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence

from harness.plan.pipeline_book import BF16, FLAT_STEP, replica_s, stage_layers, stage_link
from predictions import levels, moe, pipeline
from predictions.hardware import Chip
from predictions.network import System
from predictions.topology import spans

ADAM = 10  # bytes a parameter: bf16 weights + bf16 gradients + fp32 moments (training.md §6.3)
BATCH_ROLES = ("data", "fsdp", "expert")


def moe_config(cfg) -> moe.MoEConfig:
    """A ``llama_train`` MoE config (E > 0) in ``predictions.moe``'s letters: every layer MoE,
    GQA attention (what the workload runs, ``workloads.llama.moe_presets.NOTES``)."""
    return moe.MoEConfig(L=cfg.L, D=cfg.D, F=cfg.F, N=cfg.N, K=cfg.K, H=cfg.H, V=cfg.V,
                         E=cfg.E, k=cfg.k, shared=cfg.shared_experts)


# published layouts of the MoE presets: (layout, mesh by role, what gpus.md says of it)
PUBLISHED: dict[str, tuple[str, dict[str, int], str]] = {
    "deepseek_v3": ("pp+dp_ep", {"stage": 16, "data": 2, "expert": 64},
                    "DeepSeek-V3 as published (gpus.md: 16-way PP x 2-way ZeRO-1 DP x 64-way EP "
                    "over 8 nodes, 2048 H800s)"),
}


def spans_rule(cfg: moe.MoEConfig, chip: Chip, system: System | None) -> str:
    """gpus.md (§6.2): if F < 8·C/W_node EP stays within 1-2 nodes (GPU nodes only)."""
    if chip.kind != "gpu" or system is None or len(system.levels) < 2:
        return ""
    C, W, d = chip.flops_per_s("bf16"), system.levels[1].bytes_per_s, system.domain
    zmax = moe.ep_max_Z(cfg.F, cfg.k, C, W, d)
    if moe.ep_spans_nodes(cfg.F, C, W, d):
        return f"F={cfg.F} >= {d}*C/W_node={d * C / W:,.0f}: EP can span many nodes (gpus.md)"
    return (f"F={cfg.F} < {d}*C/W_node={d * C / W:,.0f}: EP stays within 1-2 nodes, "
            f"compute-bound while Z < {zmax:,.1f} (gpus.md)")


@dataclasses.dataclass(frozen=True)
class ExpertPriced:
    """One expert layout priced by the book (seconds per step, bytes per device)."""

    step_s: float
    expert_math_s: float      # the routed matmuls per step, padded to the capacity
    a2a_s: float              # dispatch + combine, forward and backward, per step
    a2a_level: str            # the level the binding all-to-all crosses ("ici", "node", ...)
    a2a_levels: tuple         # (level, seconds) of one dispatch
    dispatch_bytes: float     # V of one dispatch over one expert group
    outer_s: float            # the gradient reduction (all-reduce, or FSDP's gathers)
    memory: dict
    bubble: float = 0.0

    @property
    def need_bytes(self) -> float:
        return sum(self.memory.values())

    @property
    def bound(self) -> str:
        """gpus.md: compute-bound while the expert matmuls hide the all-to-alls."""
        return "compute" if self.expert_math_s >= self.a2a_s else "comm"


def size(mesh: Mapping[str, int], *roles: str) -> int:
    return math.prod(int(mesh.get(r, 1)) for r in roles)


def axis_index(mesh: Mapping[str, int], roles: Sequence[str]) -> tuple[int, ...]:
    return tuple(i for i, r in enumerate(mesh) if r in roles and mesh[r] > 1)


UNIT = 1e9  # bytes a collective is priced at once, then scaled (its bandwidth term is linear)


@functools.lru_cache(maxsize=4096)
def _unit_price(kind: str, dims: tuple[int, ...], idx: tuple[int, ...], system: System
                ) -> levels.LevelTime:
    return levels.price(kind, UNIT, levels.mesh_groups(dims, idx), system)


def level_price(kind: str, nbytes: float, dims: tuple[int, ...], idx: tuple[int, ...],
                system: System) -> levels.LevelTime:
    """``predictions.levels.price`` over the mesh axes ``idx``: the bandwidth terms (V over
    each level's W, linear in V) scaled from one pricing at ``UNIT`` bytes, the hops'
    latency as it is (the search prices each group once, not once per capacity)."""
    t, r = _unit_price(kind, dims, idx, system), nbytes / UNIT
    at = tuple(dataclasses.replace(c, t_s=c.t_s * r) for c in t.crossings)
    return dataclasses.replace(t, nbytes=nbytes, crossings=at, t_bandwidth_s=t.t_bandwidth_s * r)


def collective_s(kind: str, nbytes: float, mesh: Mapping[str, int], roles: Sequence[str],
                 chip: Chip, topology: Sequence[int], system: System | None) -> float:
    """One collective of ``nbytes`` per device over the mesh axes playing ``roles``: at the
    network levels its groups cross on ``system``, else on the slice's ICI as training.md
    prices DP, an all-gather V/(W·M), an all-reduce twice that (M: the physical axes the
    group spans)."""
    idx = axis_index(mesh, roles)
    if not idx or nbytes <= 0:
        return 0.0
    dims = tuple(int(v) for v in mesh.values())
    if system is not None:
        return level_price(kind, nbytes, dims, idx, system).seconds
    m = max(1, sum(spans(dims, topology)[i] for i in idx))
    once = nbytes / (chip.axis_bytes_per_s * m)
    return 2 * once if kind == "all-reduce" else once


def dispatch(cfg: moe.MoEConfig, mesh: Mapping[str, int], tokens: float, capacity: float | None,
             chip: Chip, system: System | None) -> moe.AllToAll | None:
    """One dispatch (or combine) over an expert group: V = c·(B/X)·k·D·2 bytes (dropless:
    c = 1), priced at the level the group crosses (``predictions.moe.all_to_all``); None
    without an expert axis."""
    Z = size(mesh, "expert")
    if Z <= 1:
        return None
    V = moe.dispatch_bytes(tokens / size(mesh, "data", "fsdp"), cfg.k, cfg.D, BF16, capacity)
    if system is None:  # one slice or node: sharding.md's V*max(n)/(4*N*W)
        return moe.all_to_all(V, chip, Z)
    dims = tuple(int(v) for v in mesh.values())
    t = level_price("all-to-all", V, dims, (list(mesh).index("expert"),), system)
    return moe.AllToAll(V, t.seconds, tuple((c.level, c.t_s) for c in t.crossings), 0.0,
                        t.formula)


def price(cfg: moe.MoEConfig, model, mesh: Mapping[str, int], tokens: float, T: int,
          chip: Chip, topology: Sequence[int], system: System | None,
          capacity: float | None, n_ckpt: float, M: int = 1, schedule: str = "gpipe"
          ) -> ExpertPriced:
    """The book's step and memory of ``cfg`` (``model``: its active part, the book's
    ``transformer.Config``) on ``mesh`` (role -> size, row-major) at the global batch of
    ``tokens`` (T each) with capacity factor ``capacity`` (None: dropless)."""
    N, S, Y = size(mesh, *mesh), size(mesh, "stage"), size(mesh, "model")
    X, Z = size(mesh, "data", "fsdp"), size(mesh, "expert")
    c = capacity or 1.0
    C = chip.flops_per_s("bf16")
    layers = stage_layers(cfg.L, S, 1)
    m_y = spans(tuple(mesh.values()), topology)[-1] if Y > 1 else 1
    stage_model = model if S == 1 else dataclasses.replace(model, V=max(1, model.V // 2))
    work = replica_s(stage_model, tokens / (X * Z), chip, Y, m_y, T, layers if S > 1 else None)
    # transformers.md §5.4: the routed matmuls, 3x the forward's 2·B·k·3DF a MoE layer (§1.1)
    routed = moe.routed_flops(cfg, tokens, training=True) / (N * C) * (layers * S / cfg.L)
    t = dispatch(cfg, mesh, tokens, capacity, chip, system)
    a2a = 4 * layers * t.seconds if t is not None else 0.0  # dispatch + combine, fwd + bwd
    core = work - routed + max(c * routed, a2a)
    p = moe.params(cfg)
    routed_share = p.routed * (1 / Z if Z <= cfg.E else 1 / cfg.E) / (S * Y)
    dense = BF16 * (p.total - p.routed) / (S * Y)
    fsdp = size(mesh, "fsdp") > 1
    kinds = ("all-gather",) if fsdp else ("all-reduce",)
    outer = {k: collective_s(k, dense, mesh, BATCH_ROLES, chip, topology, system)
             + collective_s(k, BF16 * routed_share, mesh, ("data", "fsdp"), chip, topology,
                            system) for k in kinds}
    memory = _memory(cfg, mesh, tokens, n_ckpt, t, S, M, schedule)
    if S > 1:
        hop = pipeline.hop_s(tokens / (X * Z), cfg.D, stage_link(chip, system, N), M)
        step = pipeline.pipelined_step(core, outer["all-reduce"], hop, schedule, S, M)
        return ExpertPriced(step.step_s, c * routed, a2a, _level(t), _levels(t),
                            t.nbytes if t else 0.0, outer["all-reduce"], memory, step.bubble)
    fwd, bwd = core / 3, 2 * core / 3  # transformers.md: the backward is 2x the forward
    ag = outer.get("all-gather", 0.0)
    step = FLAT_STEP["fsdp" if fsdp else "dp"](fwd, bwd, ag, outer.get("all-reduce", 0.0))
    return ExpertPriced(step, c * routed, a2a, _level(t), _levels(t), t.nbytes if t else 0.0,
                        max(outer.values()), memory)


def _level(t: moe.AllToAll | None) -> str:
    return max(t.levels, key=lambda lv: lv[1])[0] if t is not None and t.levels else "-"


def _levels(t: moe.AllToAll | None) -> tuple:
    return tuple(t.levels) if t is not None else ()


def _memory(cfg: moe.MoEConfig, mesh: Mapping[str, int], tokens: float, n_ckpt: float,
            t: moe.AllToAll | None, S: int, M: int, schedule: str) -> dict[str, float]:
    """Bytes per device by part (the module's docstring)."""
    X, Z, Y = size(mesh, "data", "fsdp"), size(mesh, "expert"), size(mesh, "model")
    per_device_tokens = tokens / (X * Z)
    ckpt = BF16 * cfg.D * per_device_tokens * n_ckpt * stage_layers(cfg.L, S, 1) / Y
    if S > 1:  # ZeRO-1: weights and gradients whole per stage, moments over the replicas
        routed, rest = moe.weight_bytes_per_device(cfg, mesh, 4)
        moments = sum(moe.weight_bytes_per_device(cfg, mesh, 8)) / X
        weights = routed + rest + moments
        acts = pipeline.activation_bytes(schedule, S, M, ckpt / M)
    else:
        weights = sum(moe.weight_bytes_per_device(cfg, mesh, ADAM))
        acts = ckpt
    # one layer's send and receive buffers, of one microbatch when pipelined
    buffers = 2 * t.nbytes / (Z * M) if t is not None else 0.0
    return {"weights": weights, "activations": acts, "dispatch": buffers}
