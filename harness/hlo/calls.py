"""Custom calls -> ``predictions.rules`` descs: which library call or kernel does what work.

A custom call is a call into a library or a hand-written kernel; the HLO gives its target name,
its operand and result shapes and a backend config. ``CUSTOM_CALLS`` maps each target whose
work those determine to the builder of its desc (a builder may still answer with a reason, when
this call's config lacks what the rule needs); ``NO_RULE`` says, per known target, why its work
cannot be read from the HLO; any other target is unmodeled with ``UNKNOWN``'s reason.
``why_unmodeled`` gives the reason an unmodeled call's row carries (``schema.WHY_UNMODELED``).

ROCm builds of XLA keep the CUDA names (the MI300X traces in ``tests/fixtures/external/``):
``__cublas$gemm`` runs on rocBLAS or hipBLASLt, ``__cublas$lt$matmul`` on hipBLASLt,
``__cudnn$conv*`` on MIOpen. The names are XLA's ``xla/service/gpu/cublas_cudnn.cc``.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from harness.hlo import conv, tpu
from harness.hlo.attrs import config_ints
from harness.hlo.fmha import fmha_desc, is_fmha, splash_desc, splash_phase
from harness.hlo.ir import Instruction
from harness.hlo.te_attention import TE_ATTENTION, TE_OPAQUE, te_attention_desc
from predictions.rules import OpDesc, Shape

Builder = Callable[[Instruction], "OpDesc | str"]   # a desc, or why there is none

UNKNOWN = "no rule (an opaque library call; shapes do not give its FLOPs)"
_WORKSPACE_DTYPES = frozenset({"u8", "s8"})
_KERNEL_NAME = re.compile(r'kernel_name="([^"]*)"')


def target(instr: Instruction) -> str:
    return str(instr.attrs.get("custom_call_target", "")).strip('"')


def _results(instr: Instruction) -> tuple[Shape, ...]:
    """The result leaves but a library's scratch workspace: the last leaf of a tuple result when
    it is a flat u8/s8 buffer (``(bf16[8192,1024], s8[18874368])``). It never leaves the
    library's kernels, so it is not counted as HBM traffic."""
    leaves = tuple(instr.shapes)
    if len(leaves) > 1 and leaves[-1].dtype in _WORKSPACE_DTYPES and len(leaves[-1].dims) == 1:
        return leaves[:-1]
    return leaves


def kernel_name(instr: Instruction) -> str:
    """A kernel's name: jax's ``kernel_name`` attribute where the HLO kept it, else the
    ``op_name`` of its metadata ("" when neither)."""
    m = _KERNEL_NAME.search(str(instr.attrs.get("frontend_attributes", "")))
    return m.group(1) if m else instr.op_name


def _gemm_dims(instr: Instruction) -> dict | None:
    config = instr.backend_config()
    gemm = config.get("gemm_backend_config", config)
    dims = gemm.get("dot_dimension_numbers") if isinstance(gemm, dict) else None
    return dims if isinstance(dims, dict) else None


def _gemm(instr: Instruction) -> OpDesc | str:
    """A BLAS GEMM: ``gemm_backend_config.dot_dimension_numbers`` make it a ``dot`` (book
    counting, roofline.md: 2·M·N·K, batch dims once) over the first two operands, reading
    every operand (a third is the C or bias matrix when beta != 0 or a bias epilogue runs; f8
    adds scale scalars) and writing every result but the workspace (an epilogue's aux output,
    an f8 amax, included)."""
    dims = _gemm_dims(instr)
    if dims is None:
        return f"custom call {target(instr)}: no dot_dimension_numbers in its backend config"
    return OpDesc("dot", _results(instr), instr.operand_leaves,
                  config_ints(dims.get("lhs_contracting_dimensions")),
                  config_ints(dims.get("rhs_contracting_dimensions")),
                  config_ints(dims.get("lhs_batch_dimensions")),
                  config_ints(dims.get("rhs_batch_dimensions")))


# cuDNN / MIOpen convolution targets -> the pseudo-opcode of their direction, and where the
# forward convolution's (input, kernel, output) are among (operands, results): the call's
# dim_labels and window describe the forward convolution in every direction (XLA's
# GpuConvConfig). The bias/activation epilogue of a fused forward (at most a few FLOPs per
# output element, against 2·C_in·window for the convolution) is left out of the FLOPs.
_FWD = ("convolution", lambda ops, res: (ops[0], ops[1], res[0]))
CONVOLUTIONS = {
    "__cudnn$convForward": _FWD,
    "__cudnn$convBiasActivationForward": _FWD,    # + bias, side input operands
    "__cudnn$convForwardGraph": _FWD,             # + the operands of its pointwise graph
    "__cudnn$convBackwardInput": ("convolution-backward-input",
                                  lambda ops, res: (res[0], ops[1], ops[0])),
    "__cudnn$convBackwardFilter": ("convolution-backward-filter",
                                   lambda ops, res: (ops[0], res[0], ops[1])),
}


def _dnn_conv(instr: Instruction) -> OpDesc | str:
    """A library convolution as the dot over its kernel (``harness.hlo.conv.describe``): 2 x
    forward output elements x input features x the window positions that meet input data."""
    opcode, forward = CONVOLUTIONS[target(instr)]
    labels, operands, results = instr.attrs.get("dim_labels"), instr.operand_leaves, _results(instr)
    if labels is None or len(operands) < 2 or not results:
        return f"custom call {target(instr)}: no dim_labels or operand shapes"
    lhs, rhs, out = forward(operands, results)
    for label, shape, what in zip(labels, (lhs, rhs, out), ("input", "kernel", "output")):
        if len(label) != len(shape.dims):
            return f"custom call {target(instr)}: dim_labels {labels} do not fit the {what} {shape}"
    return conv.describe(opcode, results, operands, labels, instr.attrs.get("window") or {},
                         lhs, rhs, out)


def _pallas_tpu(instr: Instruction) -> OpDesc | str:
    """A Pallas/Mosaic TPU kernel: its FLOPs are in its code; priced by the ``cost_estimate``
    the author gave ``pallas_call`` (jax writes it into ``custom_call_config``; the compiled HLO
    keeps it, its numbers as strings), when given; else, for a kernel whose work its shapes
    tell (splash attention: ``harness.hlo.fmha.splash_desc``), from its shapes."""
    config = instr.backend_config().get("custom_call_config")
    est = config.get("cost_estimate") if isinstance(config, dict) else None
    if isinstance(est, dict) and {"flops", "bytes_accessed"} <= set(est):
        return OpDesc("kernel-estimate", _results(instr), instr.operand_leaves,
                      estimate=(float(est["flops"]), float(est["bytes_accessed"])))
    name = kernel_name(instr)
    phase = splash_phase(instr, name)
    if phase is not None:
        return splash_desc(instr, phase)
    return (f"custom call tpu_custom_call{f' ({name})' if name else ''}: a Pallas/Mosaic kernel "
            f"without a cost_estimate; its work is in its code, not in its shapes")


def _as(opcode: str) -> Builder:
    """Priced by the rule of ``opcode``, which does the same work over the same shapes."""
    return lambda instr: OpDesc(opcode, _results(instr), instr.operand_leaves)


CUSTOM_CALLS: dict[str, Builder] = {
    # cuBLAS / rocBLAS / hipBLASLt GEMMs
    **{t: _gemm for t in ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8",
                          "__cublas$lt$matmul$mx")},
    # cuDNN / MIOpen convolutions, and the filter relayouts before int8 ones (a copy)
    **{t: _dnn_conv for t in CONVOLUTIONS},
    "__cudnn$convReorderFilter": _as("copy"), "__cudnn$convReorderFilterAndBias": _as("copy"),
    # TransformerEngine attention (harness.hlo.te_attention)
    **{t: te_attention_desc for t in TE_ATTENTION},
    "tpu_custom_call": _pallas_tpu,
    # CUB's radix sort (jnp.sort on GPU): the sort rule's n·log2(n) convention
    "__cub$DeviceRadixSort": _as("sort"),
    # jax's GPU threefry kernels (jax_threefry_gpu_kernel_lowering): random bits, as rng
    **{f"{p}_threefry2x32{s}": _as("rng-bit-generator") for p in ("cu", "hip")
       for s in ("", "_ffi")},
    # libtpu's bookkeeping calls (harness.hlo.tpu)
    **{t: _as(op) for t, op in tpu.CUSTOM_CALL_AS.items()},
}

_KERNEL = "its work is in the kernel's code, not in its shapes"
NO_RULE: dict[str, str] = {
    "__gpu$xla.gpu.triton": f"a Triton kernel (Pallas on GPU, jax-triton); {_KERNEL}, and jax "
                            f"drops a pallas_call's cost_estimate on GPU",
    "mosaic_gpu": f"a Mosaic GPU kernel (Pallas); {_KERNEL}",
    "mosaic_gpu_v2": f"a Mosaic GPU kernel (Pallas); {_KERNEL}",
    "__cublas$triangularSolve": "a triangular solve: no rule",
    "__cublas$lt$groupedMatmul": "a grouped GEMM: no rule (its groups' sizes are an operand)",
    "te_gemm_ffi": "TransformerEngine's GEMM: its operand order and transposes change between "
                   "TE versions; no rule",
    "te_grouped_gemm_ffi": "TransformerEngine's grouped GEMM: its groups' sizes are an operand",
    **TE_OPAQUE,
    "__cudnn$norm": "a cuDNN normalization: no rule",
    "__gpu$TopK": "a top-k kernel: no rule",
    **{f"xla{f}_python_{d}_callback": "a host callback: its time is Python on the host, not "
                                      "device work" for f in ("", "_ffi") for d in ("cpu", "gpu")},
}


def _builder(instr: Instruction) -> Builder | None:
    t = target(instr)
    if t in CUSTOM_CALLS:
        return CUSTOM_CALLS[t]
    if is_fmha(instr):
        return fmha_desc
    if t not in NO_RULE and _gemm_dims(instr) is not None:
        return _gemm  # a GEMM under a name not listed: its config says what it does
    return None


def describe(instr: Instruction) -> OpDesc | str:
    """The desc of one custom call, or why it has none (a sentence naming the target)."""
    build = _builder(instr)
    if build is None:
        return f"custom call {target(instr)}: {NO_RULE.get(target(instr), UNKNOWN)}"
    return build(instr)


def to_desc(instr: Instruction) -> OpDesc:
    """``describe``'s desc; an unmodeled call is a plain ``custom-call`` (no rule prices it)."""
    desc = describe(instr)
    return desc if isinstance(desc, OpDesc) else OpDesc("custom-call", instr.shapes,
                                                        instr.operand_leaves)


def why_unmodeled(instr: Instruction) -> str:
    """Why no rule prices this custom call; "" when a builder describes it."""
    desc = describe(instr)
    return desc if isinstance(desc, str) else ""
