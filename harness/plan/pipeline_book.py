"""The book's step and memory for one layout of ``harness plan``, pipelined or not, priced the
same way so that the two can be ranked side by side (``harness.plan.pipeline`` searches the
pipelined ones).

A step is the replica's compute and tensor parallelism (``training.step_time`` over the tokens
one data-parallel replica carries, Y-way TP over NVLink or ICI: training.md §6.1) beside the
collective over the outer, data-parallel axis, priced at the network level its groups cross
on several nodes or slices (``predictions.levels``: gpus.md's W_collective past a node,
training.md's DCN), else on the slice's ICI (training.md §6.2: DP moves 2·2·P/(Y·W·M_X) a step,
2·P/Y bytes of bf16 gradients all-reduced). Without a pipeline the outer collective overlaps
the passes (training.md: DP's reduction runs in the backward, FSDP's gathers are prefetched);
a pipeline stretches its stage's work by the bubble and leaves the reduction exposed but for
the last microbatch's backward (``predictions.pipeline.pipelined_step``; gpus.md, reference
§6.2). The mesh is row-major, the model axes innermost (docs/networks.md).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from predictions import levels, pipeline, training
from predictions.hardware import Chip
from predictions.network import System
from predictions.transformer import Config, param_count

BF16 = 2  # bytes per weight and per gradient element (training.md: bf16 weights)


def replica_s(model: Config, tokens: float, chip: Chip, Y: int, m_y: int, T: int,
              layers: int | None = None) -> float:
    """One replica's compute and TP for ``tokens`` through ``layers`` (default all) of the
    model, on Y chips (training.md's per-layer model with X = 1: no outer collective; the
    embedding and the unembedding are counted, so a stage priced this way is the one holding
    them, the pipeline's slowest)."""
    m = model if layers is None else dataclasses.replace(model, L=layers)
    return training.step_time(m, tokens, chip, Y, "tp", 1, Y, (1, m_y), seq_len=T).t_step_s


def outer_s(kind: str, nbytes: float, dims: Sequence[int], axis: int, chip: Chip, m_x: int,
            system: System | None) -> float:
    """One collective of ``nbytes`` per device over mesh axis ``axis`` of the row-major mesh
    ``dims``: at the levels its groups cross on ``system`` (gpus.md, training.md), else on
    the slice's ICI as training.md prices DP, an all-gather V/(W·M_X), an all-reduce twice
    that (W = the chip's bidirectional axis bandwidth, M_X the physical axes spanned)."""
    if dims[axis] == 1:
        return 0.0
    if system is not None:
        return levels.price(kind, nbytes, levels.mesh_groups(dims, (axis,)), system).seconds
    once = nbytes / (chip.axis_bytes_per_s * m_x)
    return 2 * once if kind == "all-reduce" else once


def flat_network_s(strategy: str, model: Config, tokens: float, chip: Chip, X: int, Y: int,
                   m_y: int, T: int, system: System) -> float:
    """The book's step of a layout without a pipeline on several nodes or slices: forward
    and backward, each pass max(its compute, its outer collective) (training.md's perfect
    overlap): DP all-reduces the 2·P/Y gradient bytes in the backward; FSDP gathers the weights
    in the forward and gathers them again and reduce-scatters the gradients in the backward
    (training.md §6.1); TP has no outer axis."""
    work = replica_s(model, tokens / X, chip, Y, m_y, T)
    fwd, bwd = work / 3, 2 * work / 3  # transformers.md: the backward is 2x the forward's FLOPs
    nbytes = BF16 * param_count(model) / Y
    outer = {kind: outer_s(kind, nbytes, (X, Y), 0, chip, 1, system) for kind in OUTER}
    return FLAT_STEP[strategy](fwd, bwd, outer["all-gather"], outer["all-reduce"])


OUTER = ("all-gather", "all-reduce")
_fsdp = lambda f, b, ag, ar: max(f, ag) + max(b, 2 * ag)  # noqa: E731
# strategy -> (forward s, backward s, all-gather s, all-reduce s) -> the step (training.md §6.1)
FLAT_STEP: dict[str, Callable[[float, float, float, float], float]] = {
    "dp": lambda f, b, ag, ar: f + max(b, ar),  # the gradients all-reduced in the backward
    "fsdp": _fsdp,      # gathered in the forward; gathered again and reduce-scattered after
    "fsdp_tp": _fsdp,
    "tp": lambda f, b, ag, ar: f + b,           # no outer axis
}


@dataclasses.dataclass(frozen=True)
class Priced:
    """One pipelined option priced: its step and its memory per chip (bytes by part)."""

    step: pipeline.PipelineStep
    memory: dict

    @property
    def need_bytes(self) -> float:
        return sum(self.memory.values())


def stage_layers(L: int, S: int, v: int) -> int:
    """Layers a stage holds: L/S, or with identity layers padding the stack to S·v chunks,
    ceil(L/(S·v))·v (workloads.llama.pipeline's pad_layers)."""
    return math.ceil(L / (S * v)) * v


def price_pipeline(model: Config, tokens: float, T: int, chip: Chip, dims: tuple[int, int, int],
                   spans: tuple[int, int, int], schedule: str, M: int, v: int, n_ckpt: float,
                   system: System | None, dp_s: float | None = None) -> Priced:
    """The book's step and memory of S stages x X replicas x Y-way TP (``dims``, the mesh
    row-major, ``spans`` the physical axes each spans) with ``schedule``, M microbatches and
    v repeats, at ``n_ckpt`` width-D checkpoints per layer and token. ``dp_s``: the outer
    reduction when already priced (it depends on S, X and Y only)."""
    S, X, Y = dims
    P = param_count(model)
    if dp_s is None:
        dp_s = outer_s("all-reduce", BF16 * P / (S * Y), dims, 1, chip, spans[1], system)
    # the slowest stage: its layers (padded) and the unembedding, D·V of the 2·D·V embedding
    # parameters the book's step counts (the embedding lookup sits on the first stage)
    stage = dataclasses.replace(model, V=max(1, model.V // 2))
    work = replica_s(stage, tokens / X, chip, Y, spans[2], T, stage_layers(model.L, S, v))
    hop = pipeline.hop_s(tokens / X, model.D, stage_link(chip, system, math.prod(dims)), M)
    step = pipeline.pipelined_step(work, dp_s, hop, schedule, S, M, v)
    memory = pipeline.stage_memory(P, model.L, model.D, schedule, S, M, X, Y, tokens, v,
                                   n_ckpt)
    # the loss head: one microbatch's fp32 logits and their gradient (workloads.llama.memory)
    memory["logits"] = 2 * 4 * tokens / (X * M) * model.V / Y
    return Priced(step, memory)


# chip kind -> the link between two stages (inside one node or slice, across them)
STAGE_LINKS: dict[str, tuple[str, str]] = {"gpu": ("nvlink", "node"), "tpu": ("ici", "dcn")}


def stage_link(chip: Chip, system: System | None, N: int) -> float:
    """The bandwidth of one stage-to-stage transfer. The stage axis is the mesh's outermost,
    so on a job of several nodes or slices its hops cross them: a GPU's share of its node's
    scale-out (gpus.md), a TPU's DCN per chip (tpus.md); inside one, NVLink or an ICI link."""
    if chip.kind not in STAGE_LINKS:
        return chip.axis_bytes_per_s
    inside, across = STAGE_LINKS[chip.kind]
    return pipeline.link_bytes_per_s(chip, across if system is not None and N > system.domain
                                     else inside)
