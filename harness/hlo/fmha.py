"""cuDNN fused attention custom calls (``__cudnn$fmha*``) -> ``predictions.rules`` descs.

What ``jax.nn.dot_product_attention(implementation="cudnn")`` compiles to on a GPU: a forward
``__cudnn$fmhaSoftmax`` (operands Q, K, V [, bias] [, sequence lengths]; results O [, softmax
statistics], u8 workspace) and a ``__cudnn$fmhaSoftmaxBackward`` (Q, K, V, statistics, dO, O, ...
-> dQ, dK, dV, workspace). The backend config's ``cudnn_fmha_backend_config`` holds the mask
(``mask_type``: NO_MASK, CAUSAL, PADDING, PADDING_CAUSAL) and the dot dimension numbers that say
which dims of K are batch/heads and head dim: the rest is the key length S. The rule that prices
the desc is ``predictions.rules.FUSED_ATTENTION``.
"""
from __future__ import annotations

from harness.hlo.ir import Instruction
from predictions.rules import OpDesc

FMHA_PREFIX = "__cudnn$fmha"

# The dot whose right operand has K's shape: bmm1 (Q K^T) forward; backward, the gradient gemm
# dO V^T (V has K's shape). Without either, K is taken as [B, S, K, H] (jax's BTNH layout).
_K_DOTS = ("bmm1_dot_dimension_numbers", "bmm2_grad_gemm2_dot_dimension_numbers")
_DEFAULT_K_DIMS = {"rhs_batch_dimensions": [0, 2], "rhs_contracting_dimensions": [3]}


def _ints(values) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in values or ())
    except (TypeError, ValueError):
        return ()


def is_fmha(instr: Instruction) -> bool:
    return str(instr.attrs.get("custom_call_target", "")).startswith(FMHA_PREFIX)


def fmha_desc(instr: Instruction) -> OpDesc:
    """The desc of one fused attention call: pseudo-opcode by direction and mask, all operands,
    the results but the u8 workspace, K's batch and contracted dims."""
    target = str(instr.attrs.get("custom_call_target", ""))
    config = instr.backend_config().get("cudnn_fmha_backend_config", {})
    config = config if isinstance(config, dict) else {}
    causal = "CAUSAL" in str(config.get("mask_type", "")).upper() or bool(
        config.get("is_causal_mask"))
    dims = next((config[k] for k in _K_DOTS if isinstance(config.get(k), dict)), _DEFAULT_K_DIMS)
    opcode = "fused-attention" + ("-backward" if "Backward" in target else "") + (
        "-causal" if causal else "")
    operands = tuple(s for leaves in instr.operand_shapes for s in leaves)
    results = tuple(s for s in instr.shapes if s.dtype != "u8")   # the scratch workspace
    return OpDesc(opcode, results, operands,
                  rhs_contracting=_ints(dims.get("rhs_contracting_dimensions")),
                  rhs_batch=_ints(dims.get("rhs_batch_dimensions")))
