"""cuDNN fused attention custom calls (``__cudnn$fmha*``) -> ``predictions.rules`` descs.

What ``jax.nn.dot_product_attention(implementation="cudnn")`` compiles to on a GPU: a forward
``__cudnn$fmhaSoftmax`` (operands Q, K, V [, bias] [, sequence lengths]; results O [, softmax
statistics], u8 workspace) and a ``__cudnn$fmhaSoftmaxBackward`` (Q, K, V, statistics, dO, O, ...
-> dQ, dK, dV, workspace). The backend config's ``cudnn_fmha_backend_config`` holds the mask
(``mask_type``: NO_MASK, CAUSAL, PADDING, PADDING_CAUSAL) and the dot dimension numbers that say
which dims of K are batch/heads and head dim: the rest is the key length S. XLA of 2023 spelt the
targets ``__cudnn$fhma*`` (``fhmaBmmBmm``, ``fhmaScaleMaskSoftmax``, ...), with the same config.

TransformerEngine's attention calls are ``harness.hlo.te_attention``'s. The rule that prices both
kinds is ``predictions.rules.FUSED_ATTENTION``.

Pallas splash attention on TPU (``jax.experimental.pallas.ops.tpu.splash_attention``, what
MaxText and ``workloads.llama.splash`` run) compiles to ``tpu_custom_call``s named after the
kernel: ``splash_{mha,mqa}_{fwd,dq,dkv}[_segmented]_{residuals,no_residuals}`` (the instruction's
name, and its ``op_name``). jax gives them no ``cost_estimate``; their operands are the scalar
block tables (integers), then Q [..., N, T, H], K and V [..., K, S, H] ([..., S, H] for MQA; the
leading dims are a ``vmap``-ed batch), then the residuals. ``splash_desc`` reads B, T, S, N, H
from Q and K. The mask lives in those block tables, constants the compiled HLO threads through
its loops, so a splash call is costed as causal (half the blocks: the mask MaxText's and our
LLaMA build); for another mask that is a lower bound on its FLOPs.
"""
from __future__ import annotations

import math
import re

from harness.hlo.attrs import config_ints
from harness.hlo.ir import Instruction
from predictions.rules import OpDesc

FMHA_PREFIXES = ("__cudnn$fmha", "__cudnn$fhma")  # today's targets; XLA of 2023's spelling

# The dot whose right operand has K's shape: bmm1 (Q K^T) forward; backward, the gradient gemm
# dO V^T (V has K's shape). Without either, K is taken as [B, S, K, H] (jax's BTNH layout).
_K_DOTS = ("bmm1_dot_dimension_numbers", "bmm2_grad_gemm2_dot_dimension_numbers")
_DEFAULT_K_DIMS = {"rhs_batch_dimensions": [0, 2], "rhs_contracting_dimensions": [3]}


def is_fmha(instr: Instruction) -> bool:
    return str(instr.attrs.get("custom_call_target", "")).startswith(FMHA_PREFIXES)


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
    operands = instr.operand_leaves
    results = tuple(s for s in instr.shapes if s.dtype != "u8")   # the scratch workspace
    return OpDesc(opcode, results, operands,
                  rhs_contracting=config_ints(dims.get("rhs_contracting_dimensions")),
                  rhs_batch=config_ints(dims.get("rhs_batch_dimensions")))


SPLASH = re.compile(r"splash_(mha|mqa)_(fwd|dq|dkv)(_segmented)?_(no_)?residuals")
_SPLASH_OPCODE = {"fwd": "fused-attention-causal", "dq": "fused-attention-dq-causal",
                  "dkv": "fused-attention-dkv-causal"}
_FLOATS = frozenset({"bf16", "f16", "f32", "f64", "f8e4m3fn", "f8e5m2"})
_SEQ_MINOR = re.compile(r'q_layout\\*"?:\s*2')  # QKVLayout.SEQ_MINOR in the kernel's xprof_metadata


def splash_phase(instr: Instruction, op_name: str) -> str | None:
    """"fwd" | "dq" | "dkv" for a splash attention kernel (by its name or op_name), else None."""
    m = SPLASH.search(instr.name) or SPLASH.search(op_name)
    return m.group(2) if m else None


def splash_desc(instr: Instruction, phase: str) -> OpDesc | str:
    """The desc of one splash kernel: forward, dQ or dK/dV (with dQ too when the backward is
    fused: a third result as large as K), causal; every operand and result counted once."""
    operands = instr.operand_leaves
    qkv = [s for s in operands if s.dtype in _FLOATS][:3]
    if len(qkv) < 3 or len(qkv[0].dims) < 3:
        return f"custom call tpu_custom_call ({instr.name}): no Q, K, V among its operands"
    q, k = qkv[0], qkv[1]
    seq_minor = bool(_SEQ_MINOR.search(str(instr.attrs.get("frontend_attributes", ""))))
    *batch, N, T, H = (*q.dims[:-2], q.dims[-1], q.dims[-2]) if seq_minor else q.dims
    S = k.dims[-1] if seq_minor else k.dims[-2]
    as_large_as_k = sum(r.elements >= k.elements for r in instr.shapes)
    opcode = ("fused-attention-backward-causal" if phase == "dkv" and as_large_as_k > 2
              else _SPLASH_OPCODE[phase])
    return OpDesc(opcode, tuple(instr.shapes), operands,
                  attention=(math.prod(batch), T, S, N, H))
