"""Per-opcode cost rules: what one HLO instruction costs on one device.

An instruction is described by an :class:`OpDesc` (plain numbers, no HLO text); a rule turns it
into a :class:`Cost` (FLOPs, HBM bytes, communication bytes). ``RULES`` is the registry, keyed by
HLO opcode. An opcode with no rule gives ``Cost(modeled=False)``: it is reported as
``unmodeled``, never silently zero.

Conventions (`roofline.md`, `profiling.md`): shapes are per device (post-SPMD); one multiply-add
is 2 FLOPs; an op reads each operand and writes its result to HBM once.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from predictions.collective_rules import COLLECTIVE_RULES

# The types live in predictions.costs (the bytes per element in predictions.dtypes); importing
# them from here is supported.
from predictions.costs import UNMODELED, Cost, OpDesc, Shape
from predictions.dtypes import DTYPE_BYTES

__all__ = ["DTYPE_BYTES", "UNMODELED", "Cost", "OpDesc", "Shape", "RULES", "CATEGORY", "Rule",
           "category", "cost", "fusion_cost"]


Rule = Callable[[OpDesc], Cost]

# Report categories in report order (harness.schema.CATEGORIES is this tuple).
CATEGORIES = ("matmul", "attention", "collective", "elementwise", "reduction", "copy", "other")
C_MATMUL, C_ATTENTION, C_COLLECTIVE, C_ELEMENTWISE, C_REDUCTION, C_COPY, C_OTHER = CATEGORIES

# HLO collective opcodes -> the collective each performs (predictions.collectives' kinds, and
# the broadcast no formula of the book covers). XLA may split each into an async ``-start`` /
# ``-done`` pair: the start does the work, the done is free.
COLLECTIVE_OPCODES: dict[str, str] = {
    "all-gather": "all-gather", "reduce-scatter": "reduce-scatter", "all-reduce": "all-reduce",
    "all-to-all": "all-to-all", "ragged-all-to-all": "all-to-all",
    "collective-permute": "collective-permute", "collective-broadcast": "collective-broadcast",
}

# XLA's async pairs, -start -> -done, doing their work once: priced from the -start's description
# (a -done alone is free), on the half the trace times (harness.hlo.cost: GPU -start, TPU -done).
# The TPU compiler also runs slices asynchronously (a layer's saved activations written to and
# read back from host memory under an offload remat policy: harness.hlo.desc).
ASYNC_SLICES = ("slice", "dynamic-slice", "dynamic-update-slice")
ASYNC_PAIRS: dict[str, str] = {**{f"{c}-start": f"{c}-done" for c in COLLECTIVE_OPCODES},
                               **{f"{s}-start": f"{s}-done" for s in ASYNC_SLICES},
                               "copy-start": "copy-done", "send": "send-done", "recv": "recv-done",
                               "async-start": "async-done", "fusion-start": "fusion-done"}

# Control flow: no cost of its own, the instructions it runs are costed (and, on CPU, their trace
# events are enclosed by its own, so reports leave it out).
CONTAINERS = frozenset({"while", "call", "conditional"})
# Free instructions. STRUCTURAL ones only name or regroup buffers: no kernel runs for them.
STRUCTURAL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                        "after-all", "add-dependency", "opt-barrier", "domain"})
# ZERO_COST adds those that run but move nothing worth counting: reshape (a bitcast, as XLA
# usually lowers it), ids, dimension sizes, and the -done half of every async pair.
ZERO_COST = STRUCTURAL | {
    "reshape", "partition-id", "replica-id", "get-dimension-size", "set-dimension-size",
    "async-update", *ASYNC_PAIRS.values()}
HOST_COPY = "host-copy"  # a copy to or from host memory, S(5) (harness.hlo.spaces)


# --- helpers -----------------------------------------------------------------------------------
def _io_bytes(op: OpDesc) -> float:
    # roofline.md: an op reads its operands and writes its result to HBM once
    return op.operand_bytes + op.result_bytes


def _out_elements(op: OpDesc) -> int:
    return sum(s.elements for s in op.results)


def _zero(op: OpDesc) -> Cost:
    return Cost()  # bookkeeping: no FLOPs, no bytes moved


def _elementwise(op: OpDesc) -> Cost:
    # 1 FLOP per output element (transcendentals too; they run on the VPU/EUP, tpus.md)
    return Cost(flops=_out_elements(op), hbm_bytes=_io_bytes(op))


def _move(op: OpDesc) -> Cost:
    return Cost(hbm_bytes=_io_bytes(op))  # data movement: 0 FLOPs, read operands + write result


def _read_result(op: OpDesc) -> Cost:
    # slice / dynamic-slice / gather read only what lands in the result (+ index operands)
    return Cost(hbm_bytes=2 * op.result_bytes + sum(s.nbytes for s in op.operands[1:]))


def _dynamic_update_slice(op: OpDesc) -> Cost:
    # in place: read + write the update (operand 1), read the start indices; the rest stays put
    update = op.operands[1].nbytes if len(op.operands) > 1 else op.result_bytes
    return Cost(hbm_bytes=2 * update + sum(s.nbytes for s in op.operands[2:]))


def _scatter(op: OpDesc) -> Cost:
    # in place like dynamic-update-slice: (operands..., indices, updates...), n operands
    n = max(1, (len(op.operands) - 1) // 2)
    indices = op.operands[n].nbytes if len(op.operands) > n else 0.0
    return Cost(hbm_bytes=indices + 2 * _updated_in_place(op))


def _inputs(op: OpDesc) -> tuple[Shape, ...]:
    # reduce / reduce-window: (inputs..., init values...), half each
    return op.operands[: max(1, len(op.operands) // 2)]


def _reduce(op: OpDesc) -> Cost:
    # 1 FLOP per input element (the harness convention; the book gives no reduction formula)
    return Cost(flops=sum(s.elements for s in _inputs(op)), hbm_bytes=_io_bytes(op))


def _sort(op: OpDesc) -> Cost:
    # n log2 n compares along the sort dimension (default: the last), times the other dims
    # (a convention: the book gives no sort formula; XLA sorts run on the VPU, tpus.md)
    dims = op.operands[0].dims if op.operands else ()
    n = dims[op.dimensions[0]] if dims and op.dimensions else (dims[-1] if dims else 1)
    elements = op.operands[0].elements if op.operands else 0
    return Cost(flops=elements * math.ceil(math.log2(n)) if n > 1 else 0,
                hbm_bytes=_io_bytes(op))


def _host_copy(op: OpDesc) -> Cost:
    # roofline.md: T_comms = bytes / W of the link they cross; a copy to or from host memory
    # crosses the host link (PCIe, W_pcie per chip: tpus.md) once and HBM once on its side
    return Cost(hbm_bytes=op.result_bytes, host_bytes=op.result_bytes)


def _dot(op: OpDesc) -> Cost:
    if len(op.operands) < 2:
        return replace(UNMODELED, notes=("dot without two operand shapes",))
    lhs, rhs = op.operands[0], op.operands[1]
    free_rhs = [d for i, d in enumerate(rhs.dims)
                if i not in op.rhs_contracting and i not in op.rhs_batch]
    # roofline.md: 2 x product of every distinct dim (batch and contracted counted once);
    # nothing contracted = an elementwise product, 1 FLOP per output element
    factor = 2 if op.lhs_contracting else 1
    return Cost(flops=factor * lhs.elements * math.prod(free_rhs), hbm_bytes=_io_bytes(op))


# Where the forward convolution's output and kernel are, per direction: a library call for a
# backward pass is described by the forward convolution's dim_labels and window (XLA's
# GpuConvConfig): backward-input reads (dy, W) and writes dx; backward-filter reads (x, dy) and
# writes dW. Each does the forward's multiply-adds (transformers.md: a matmul trains at 2NPM
# forward, 2NPM for the input gradient, 2NPM for the weight gradient).
CONV_VIEWS: dict[str, Callable[[OpDesc], tuple[Shape, Shape]]] = {   # -> (output, kernel)
    "convolution": lambda op: (op.results[0], op.operands[1]),
    "convolution-backward-input": lambda op: (op.operands[0], op.operands[1]),
    "convolution-backward-filter": lambda op: (op.operands[1], op.results[0]),
}


def _convolution(op: OpDesc) -> Cost:
    # a dot over the kernel (roofline.md: 2 x every distinct dim): 2 x output elements x (the
    # kernel dims each output contracts)
    if len(op.operands) < 2 or not op.results or not CONV_VIEWS[op.opcode](op)[1].dims:
        return replace(UNMODELED, notes=(f"{op.opcode} without shapes",))
    out, kernel = CONV_VIEWS[op.opcode](op)
    contracted = op.rhs_contracting
    notes: tuple[str, ...] = ()
    if not contracted:  # guess: XLA's canonical HWIO puts the output features last
        contracted = tuple(range(len(kernel.dims) - 1))
        notes = ("convolution: kernel output-feature dim guessed (last)",)
    per_output = math.prod(kernel.dims[i] for i in contracted)
    if op.window_positions is not None:  # only the window positions that meet input data
        per_output *= op.window_positions
    return Cost(flops=2 * out.elements * per_output, hbm_bytes=_io_bytes(op), notes=notes)


# --- fused attention (cuDNN flash-attention calls, Pallas splash kernels) ----------------------
# The HLO layer describes a ``__cudnn$fmha*`` custom call as one of these pseudo-opcodes, with
# operands (Q, K, V, ...) and ``rhs_batch``/``rhs_contracting`` naming K's batch/head and head-dim
# dims (the rest of K is the key length S). Forward: QK^T and PV are 2·B·T·S·N·H FLOPs each
# (roofline.md's 2 x every distinct dim), 4·B·T·S·N·H; a causal mask skips half (the convention
# of FlashAttention's FLOP counts; exactly (S+1)/2S when T = S). Backward: 2.5x the forward
# (five T x S matmuls to the forward's two, recomputing QK^T: FlashAttention-2's accounting).
# A backward split in two kernels (Pallas splash attention on TPU) recomputes the scores in each:
# dQ runs QK^T, dO·V^T and dS·K (3 matmuls, 1.5x the forward's two); dK/dV runs QK^T, P^T·dO,
# dO·V^T and dS^T·Q (4 matmuls, 2x): 3.5x the forward between them.
# Bytes: every operand read (Q, K, V; dO, O and the softmax statistics backward) and every result
# written once (O, or dQ, dK, dV); the T x S scores never reach HBM (profiling.md: inside a
# fusion values stay on chip).
FUSED_ATTENTION: dict[str, tuple[float, float]] = {   # pseudo-opcode: (x forward, x causal)
    "fused-attention": (1.0, 1.0),
    "fused-attention-causal": (1.0, 0.5),
    "fused-attention-backward": (2.5, 1.0),
    "fused-attention-backward-causal": (2.5, 0.5),
    "fused-attention-dq": (1.5, 1.0),
    "fused-attention-dq-causal": (1.5, 0.5),
    "fused-attention-dkv": (2.0, 1.0),
    "fused-attention-dkv-causal": (2.0, 0.5),
}


def _fused_attention(op: OpDesc) -> Cost:
    passes, causal = FUSED_ATTENTION[op.opcode]
    if op.attention is not None:  # the call names B, T, S, N, H (TransformerEngine's attributes)
        return Cost(flops=4.0 * math.prod(op.attention) * passes * causal,
                    hbm_bytes=_io_bytes(op))
    if len(op.operands) < 3 or not op.rhs_contracting:
        return replace(UNMODELED, notes=(f"{op.opcode} without Q, K, V and dot dimensions",))
    q, k = op.operands[0], op.operands[1]
    S = math.prod(d for i, d in enumerate(k.dims)
                  if i not in op.rhs_batch and i not in op.rhs_contracting)
    return Cost(flops=4.0 * q.elements * S * passes * causal, hbm_bytes=_io_bytes(op))


def _kernel_estimate(op: OpDesc) -> Cost:
    # a hand-written kernel's own declaration (Pallas: pallas_call(cost_estimate=
    # pl.CostEstimate(flops, transcendentals, bytes_accessed)), what XLA's scheduler uses too)
    if op.estimate is None:
        return replace(UNMODELED, notes=("kernel without a cost estimate",))
    return Cost(flops=op.estimate[0], hbm_bytes=op.estimate[1])


ELEMENTWISE = (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2",
    "and", "or", "xor", "not", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "compare", "select", "clamp", "convert", "negate", "abs", "sign", "floor", "ceil",
    "round-nearest-afz", "round-nearest-even", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "tanh", "logistic", "rsqrt", "sqrt", "cbrt", "cosine", "sine", "tan", "erf",
    "is-finite", "popcnt", "count-leading-zeros", "real", "imag", "complex", "reduce-precision",
    "stochastic-convert", "map", "rng", "rng-bit-generator",
)
MOVEMENT = ("copy", "copy-start", "transpose", "broadcast", "concatenate", "pad", "reverse",
            "iota")


RULES: dict[str, Rule] = {
    **{name: _elementwise for name in ELEMENTWISE},
    **{name: _move for name in MOVEMENT},
    # reshape is a copy on some backends; treated as a bitcast (free), as XLA usually lowers it
    **{name: _zero for name in ZERO_COST},
    "bitcast-convert": _move,  # a reinterpretation: bytes, no arithmetic
    "slice": _read_result, "dynamic-slice": _read_result, "gather": _read_result,
    "dynamic-update-slice": _dynamic_update_slice, "scatter": _scatter,
    "reduce": _reduce, "reduce-window": _reduce, "select-and-scatter": _reduce,
    "sort": _sort, "dot": _dot, **{name: _convolution for name in CONV_VIEWS},
    HOST_COPY: _host_copy,
    **COLLECTIVE_RULES,
    **{name: _fused_attention for name in FUSED_ATTENTION},
    "kernel-estimate": _kernel_estimate,
}

# HLO opcode -> report category (harness.schema.CATEGORIES); fusions are classified by the HLO
# layer from their contents.
CATEGORY: dict[str, str] = {
    **{name: C_ELEMENTWISE for name in ELEMENTWISE + ("bitcast-convert",)},
    **{name: C_COPY for name in MOVEMENT + ("slice", "dynamic-slice", "gather", HOST_COPY,
                                            "dynamic-update-slice", "scatter", "sort")},
    **{name: C_REDUCTION for name in ("reduce", "reduce-window", "select-and-scatter")},
    **{name: C_COLLECTIVE for name in COLLECTIVE_RULES},
    "dot": C_MATMUL, **{name: C_MATMUL for name in CONV_VIEWS},
    **{name: C_ATTENTION for name in FUSED_ATTENTION},
    "kernel-estimate": C_OTHER,  # a hand-written kernel: the HLO layer names it by its target
}


def category(opcode: str) -> str:
    return CATEGORY.get(opcode, C_OTHER)


def cost(op: OpDesc) -> Cost:
    """The cost of one instruction by its opcode's rule; ``UNMODELED`` when no rule covers it."""
    rule = RULES.get(op.opcode)
    if rule is None:
        return replace(UNMODELED, notes=(f"no rule for opcode {op.opcode!r}",))
    return rule(op)


def _updated_in_place(op: OpDesc) -> float:
    # bytes an in-place update writes: the update of a dynamic-update-slice, a scatter's updates
    if op.opcode == "dynamic-update-slice" and len(op.operands) > 1:
        return op.operands[1].nbytes
    n = max(1, (len(op.operands) - 1) // 2)
    return sum(s.nbytes for s in op.operands[n + 1:])


def fusion_cost(outer: OpDesc, inner: list[OpDesc]) -> Cost:
    """A fusion: the FLOPs (and any collective) of its inner instructions, the HBM bytes of the
    outer operands + results only (profiling.md: inner values stay on chip). ``outer`` already
    says which bytes move: the HLO layer (``harness.hlo.desc``) leaves out a buffer updated in
    place and reads only the slices of a sliced operand. Nested fusions must be flattened by
    the caller. Unmodeled inner instructions make the fusion unmodeled (numbers kept)."""
    total = Cost()
    for op in inner:
        total = total + replace(cost(op), hbm_bytes=0.0)
    return replace(total, hbm_bytes=_io_bytes(outer))
