"""The sentences of the pipeline's and the experts' collectives (``reasons.REASONS``' stage
transfer, expert dispatch / combine and the weights an FSDP loop gathers again), with the
book's cost of each: what one reason says, read from ``reasons.Facts`` (duck-typed here, so
this module imports none of ``reasons``).

- A stage transfer (book §6.1 "pipeline"; §6.2 and gpus.md "Pipeline Parallelism") carries one
  microbatch's activations, B/M · T · D values, from a stage to the next: a hop costs
  2BD/(W·N_MB) (bf16) and the whole pipeline 2BD/(W·N_MB)·(N_MB + N_stages − 2), "basically
  free" beside data and tensor parallelism; its costs are the bubble and the rest.
- An MoE layer's two all-to-alls (book §5.4; gpus.md "Expert parallelism"): dispatch sends each
  token's k routed copies (tokens · k · D values, padded to E · C slots by a capacity) to their
  experts' devices, combine brings the results back; each ≈ 1/4 of an AllGather of the same
  bytes on a TPU ring (V/(4W), §4.2), V·(N−1)/(N²·W_gpu) inside a GPU node and V/(M·W_node)
  across M nodes (§4.3).
- ZeRO-3 inside a microbatch loop gathers each weight once per microbatch (§6.2: "poor
  interaction with ZeRO-3 (weights regathered per microbatch)"); ZeRO-1 keeps the weights whole.
"""
from __future__ import annotations

import math

from harness.units import fmt_bytes
from predictions.dtypes import DTYPE_BYTES


def _size(f) -> str:
    return fmt_bytes(f.nbytes) if f.nbytes else "?"


def _per(f) -> float:
    """Bytes per element of the collective's type (0 where unknown)."""
    return float(DTYPE_BYTES.get(f.dtype, 0))


def microbatch(f) -> str:
    """The value a stage transfer carries in the book's letters: "[2, 8, 32] f32: B/M·T·D =
    2·8·32 x 4 bytes = 2.00 KiB per device" (the last dimension D, the one before it T, the
    product of the rest the microbatch's sequences on this device)."""
    dims = tuple(f.dims or ())
    shown = f"[{', '.join(map(str, dims))}] {f.dtype}".strip()
    if len(dims) >= 3:
        letters = f"B/M·T·D = {math.prod(dims[:-2])}·{dims[-2]}·{dims[-1]}"
    elif len(dims) == 2:
        letters = f"(B/M·T)·D = {dims[0]}·{dims[1]}"
    else:
        return f"{shown} = {_size(f)} per device"
    return f"{shown}: {letters} x {_per(f):g} bytes = {_size(f)} per device"


def stage_why(f) -> str:
    backward = "transpose(" in f.source_op
    what = ("the gradient of one microbatch's activations, sent back to the previous stage"
            if backward else "one microbatch's activations, handed by each stage to the next")
    return (f"a pipeline stage transfer over {f.stage_axis}: {what} ({microbatch(f)}); its "
            f"pairs shift by one along {f.stage_axis} and the layer matmul {f.dot} reads what "
            f"arrives. The book prices a hop at 2BD/(W·N_MB) (the microbatch's B/M·T·D values "
            f"in bf16 over the link), N_MB + N_stages − 2 of them a step: nearly free beside DP "
            f"and TP (gpus.md pipelining, book §6.2); the pipeline's cost is its bubble")


_EXPERT = {
    "dispatch": "sends each token's routed copies to the devices holding their experts",
    "combine": "brings the experts' results back to the devices holding their tokens",
}


def _slots(f) -> str:
    """The buffer as routed slots of width D: "64 slots x D = 32 x 4 bytes"."""
    dims = tuple(f.dims or ())
    if not dims or not _per(f) or not f.nbytes:
        return ""
    slots = f.nbytes / (_per(f) * dims[-1])
    return f" = {slots:g} slots x D = {dims[-1]} x {_per(f):g} bytes"


def expert_why(f) -> str:
    backward = " (backward pass: the gradients take the reverse trip)" \
        if "transpose(" in f.source_op else ""
    return (f"the MoE {f.expert} all-to-all over {f.axes or 'its group'}: it {_EXPERT[f.expert]}"
            f"{backward}. It moves V = {_size(f)} per device{_slots(f)}: the tokens·k routed "
            f"copies of this device's tokens, padded to E·C slots where a capacity bounds the "
            f"experts. The book: two all-to-alls per MoE layer, each ≈ 1/4 of an AllGather of "
            f"the same bytes on a TPU ring, V/(4W) (§5.4, §4.2); on GPUs V·(N−1)/(N²·W) inside "
            f"a node, V/(M·W_node) across M nodes (§4.3)")


EXPERT_FIXES = (
    "keep the expert axis inside one node or slice (EP over NVLink / ICI: the all-to-all "
    "crosses no slower level, gpus.md)",
    "put fewer devices on the expert axis (each holds more experts; the all-to-all spans "
    "fewer links)",
    "lower the capacity factor (fewer padded slots: the bytes are E·C·D, and C = capacity x "
    "tokens·k/E)",
)


def regather_why(f) -> str:
    return (f"{f.value} is gathered {f.over} for {f.dot} {f.regathered} times a step, the same "
            f"bytes each time: the loop around it (a microbatch or pipeline-tick loop) carries "
            f"the weight unchanged and gathers it again each iteration. A weight stored sharded "
            f"(FSDP / ZeRO-3) inside a microbatch loop is gathered once per microbatch (book "
            f"§6.2: pipelining's \"poor interaction with ZeRO-3\", weights regathered per "
            f"microbatch)")


REGATHER_FIX = ("ZeRO-1: shard the optimizer state only and keep the weights whole per stage "
                "(gathered once a step, or never), as LLaMA-3 and DeepSeek-V3 train (book §6.2); "
                "or gather the weight once before the loop")
