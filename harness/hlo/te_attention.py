"""TransformerEngine's fused attention custom calls -> ``predictions.rules`` descs.

TransformerEngine's JAX calls (``te_fused_attn_forward_ffi``, ``te_fused_attn_backward_ffi``;
cuDNN on NVIDIA, AOTriton/CK on ROCm) are typed-FFI calls whose attributes, in the HLO text
``backend_config={attn_heads = 16 : i64, is_training = true, ...}``, name what it hands the
kernel. The names, as NVIDIA/TransformerEngine's ``transformer_engine/jax/csrc/extensions/
attention.cpp`` (``FUSED_ATTN_FFI_GET_ATTRS``) reads them:

- since v1.13 (commit 9dddb36d5fd535cf8eb7d1de89b2d2efd87f477b): ``input_batch`` B,
  ``q_max_seqlen`` T, ``kv_max_seqlen`` S, ``attn_heads`` N, ``num_gqa_groups`` (KV heads),
  ``head_dim`` H, ``mask_type`` (``NVTE_Mask_Type``), ``qkv_layout`` (``NVTE_QKV_Layout``),
  ``window_size_left``/``window_size_right``, ``dropout_probability``, ``is_training``;
- since v2.5 (commit 1ddfa0c6a468be6cfe02f2cb051110c94ba17a61, multi-head latent attention):
  ``qk_head_dim`` and ``v_head_dim`` in place of ``head_dim``;
- since commit c6a92a4dced73ffabdd41d77bf3bfa2eb67f6f1c: ``bottom_right_diagonal``, the window
  aligned to the last key (as the ``*_BOTTOM_RIGHT`` masks align it).

Q, K and V are the first three operands in both directions (``cpp_extensions/attention.py``,
``fused_attn_fwd``: a packed QKV is operand 0, with empty ``[0]`` placeholders for K and V; a
packed KV is operand 1). A size the attributes lack is read from those shapes by the layout
(``TE_LAYOUTS``; without a ``qkv_layout``, TransformerEngine JAX's own BSHD layouts told apart by
the operands' ranks). Dropout and ``is_training`` change no matmul and no FLOP count.

Before its FFI calls (``te_fused_attn_forward``/``_backward``: every release before v1.13, and
ROCm/TransformerEngine as of commit ac80527d28c6051794bbdf7db0941f88fb3c5dda) TransformerEngine
packs sizes, mask and layout in an opaque ``CustomCallFusedAttnDescriptor`` whose fields change
between releases: those calls stay unpriced (``TE_OPAQUE``), their mask being unknown.
"""
from __future__ import annotations

import math
import re

import numpy as np

from harness.hlo.ir import Instruction
from predictions.rules import OpDesc, Shape

TE_ATTENTION = ("te_fused_attn_forward_ffi", "te_fused_attn_backward_ffi")
TE_OPAQUE = {t: "no mask_type attribute (TransformerEngine before its FFI calls packs its sizes, "
                "mask and layout in an opaque descriptor whose fields change between releases)"
             for t in ("te_fused_attn_forward", "te_fused_attn_backward")}

# transformer_engine/common/include/transformer_engine/fused_attn.h (NVIDIA/TransformerEngine at
# d0067d0da6cb01811b8072a7d304f0e00344ce2b): NVTE_Mask_Type NO_MASK 0, PADDING 1, CAUSAL 2,
# PADDING_CAUSAL 3, CAUSAL_BOTTOM_RIGHT 4, PADDING_CAUSAL_BOTTOM_RIGHT 5. A padding mask counts
# the padded maximum, as cuDNN's own FLOP counts do.
TE_CAUSAL_MASKS = frozenset({2, 3, 4, 5})
TE_BOTTOM_RIGHT_MASKS = frozenset({4, 5})

# NVTE_QKV_Layout -> (Q's format, K/V's format, packing). Formats: "BS" [B, S, ...], "SB"
# [S, B, ...], "BH" [B, N, S, H]. Packing: "3HD" Q K V in one [.., 3, N, H]; "H3D" [.., N, 3, H];
# "HD_2HD" Q, then K V in one [.., 2, K, H]; "HD_H2D" [.., K, 2, H]; "HD_HD_HD" three tensors.
# T3HD ... THD_SBHD_SBHD (10-14, 17, 18) pack sequences end to end and the Paged_KV layouts
# (19-24) page the KV cache: each sequence's span is a runtime value, not in the HLO.
TE_LAYOUTS: dict[int, tuple[str, str, str]] = {
    0: ("SB", "SB", "3HD"), 1: ("SB", "SB", "H3D"), 2: ("SB", "SB", "HD_2HD"),
    3: ("SB", "SB", "HD_H2D"), 4: ("SB", "SB", "HD_HD_HD"),
    5: ("BS", "BS", "3HD"), 6: ("BS", "BS", "H3D"), 7: ("BS", "BS", "HD_2HD"),
    8: ("BS", "BS", "HD_H2D"), 9: ("BS", "BS", "HD_HD_HD"),
    15: ("SB", "BS", "HD_HD_HD"), 16: ("BS", "SB", "HD_HD_HD"), 25: ("BH", "BH", "HD_HD_HD"),
}
_PACK_AXIS = {"3HD": -3, "H3D": -2, "HD_2HD": -3, "HD_H2D": -2}   # where the 3 (or 2) sits

# the attribute names of each size, newest first; FLOPs need all six
TE_SIZES: dict[str, tuple[str, ...]] = {
    "B": ("input_batch",), "T": ("q_max_seqlen",), "S": ("kv_max_seqlen",),
    "N": ("attn_heads",), "H_qk": ("qk_head_dim", "head_dim"), "H_v": ("v_head_dim", "head_dim"),
}

_FFI_ATTR = re.compile(r"(\w+) = (true|false|-?[\d.]+(?:e[-+]?\d+)?)(?: : [iuf]\d+)?")


def ffi_attrs(instr: Instruction) -> dict[str, int | float | bool]:
    """The scalar attributes of a typed-FFI custom call (``backend_config={name = 16 : i64,
    p = 1.000000e-01 : f64, is_training = true}``): ints, floats and bools."""
    out: dict[str, int | float | bool] = {}
    for k, v in _FFI_ATTR.findall(str(instr.attrs.get("backend_config", ""))):
        out[k] = (v == "true") if v in ("true", "false") else (
            float(v) if any(c in v for c in ".e") else int(v))
    return out


def _bsnh(s: Shape, fmt: str, packing: str | None) -> tuple[int, int, int, int] | None:
    """(B, S, heads, head dim) of one operand in a layout's format, the pack axis dropped."""
    dims = list(s.dims)
    if packing is not None:
        if len(dims) != 5:
            return None
        del dims[_PACK_AXIS[packing]]
    if len(dims) < 4:
        return None
    if fmt == "SB":
        return dims[1], dims[0], dims[2], dims[3]
    if fmt == "BH":
        return math.prod(dims[:-3]), dims[-2], dims[-3], dims[-1]
    return math.prod(dims[:-3]), dims[-3], dims[-2], dims[-1]


def _from_operands(operands: tuple[Shape, ...], layout: tuple[str, str, str]) -> dict[str, int]:
    """The sizes Q and K/V's shapes give under a layout; {} when they do not fit it."""
    q_fmt, kv_fmt, packing = layout
    if len(operands) < 3:
        return {}
    q = _bsnh(operands[0], q_fmt, packing if packing in ("3HD", "H3D") else None)
    if packing in ("3HD", "H3D"):
        kv = q
    elif packing in ("HD_2HD", "HD_H2D"):
        kv = _bsnh(operands[1], kv_fmt, packing)
    else:
        k, v = _bsnh(operands[1], kv_fmt, None), _bsnh(operands[2], kv_fmt, None)
        kv = None if k is None or v is None else (*k[:3], v[3])
    if q is None or kv is None:
        return {}
    return {"B": q[0], "T": q[1], "N": q[2], "H_qk": q[3], "S": kv[1], "H_v": kv[3]}


def _guess_layout(operands: tuple[Shape, ...]) -> int:
    """TransformerEngine JAX's dense layouts by rank: BS3HD, BSHD_BS2HD or BSHD_BSHD_BSHD."""
    if operands and len(operands[0].dims) == 5:
        return 5
    return 7 if len(operands) > 1 and len(operands[1].dims) == 5 else 9


def _key_pairs(T: int, S: int, left: int, right: int, causal: bool, bottom_right: bool) -> int:
    """How many (query, key) pairs a mask lets through: query i sees keys i+o-left .. i+o+right
    (o = S - T when aligned to the last key, else 0), right 0 when causal, -1 for no bound."""
    i = np.arange(T, dtype=np.int64) + (S - T if bottom_right else 0)
    right = 0 if causal else right
    lo = np.maximum(0, i - left) if left >= 0 else np.zeros_like(i)
    hi = np.minimum(S - 1, i + right) if right >= 0 else np.full_like(i, S - 1)
    return int(np.maximum(0, hi - lo + 1).sum())


def _window(a: dict, T: int, S: int, causal: bool) -> float | None:
    """The mean keys a query sees under a sliding window that cuts the mask; None otherwise."""
    left, right = int(a.get("window_size_left", -1)), int(a.get("window_size_right", -1))
    if left < 0 and (causal or right < 0):
        return None
    bottom_right = a.get("mask_type") in TE_BOTTOM_RIGHT_MASKS or bool(
        a.get("bottom_right_diagonal", False))
    pairs = _key_pairs(T, S, left, right, causal, bottom_right)
    whole = _key_pairs(T, S, -1, -1, causal, bottom_right)
    return pairs / T if pairs < whole else None


def te_attention_desc(instr: Instruction) -> OpDesc | str:
    """The desc of a TransformerEngine attention call, or why its FLOPs are unknown (naming the
    attribute it lacked). Bytes: every operand and result but the trailing workspace. FLOPs
    (``predictions.rules.FUSED_ATTENTION``) from the attributes' sizes, each one missing read
    from the operands: 2·B·T·S·N·H_qk (QK^T) + 2·B·T·S·N·H_v (PV) forward (transformers.md), so
    H is their mean; a sliding window that cuts the mask makes S the mean keys a query sees, the
    mask then counted in S (the opcode says no causal halving)."""
    target = str(instr.attrs.get("custom_call_target", "")).strip('"')
    a = ffi_attrs(instr)
    operands = instr.operand_leaves
    layout_id = int(a.get("qkv_layout", _guess_layout(operands)))
    if layout_id not in TE_LAYOUTS:
        return (f"custom call {target}: qkv_layout {layout_id} packs sequences (THD) or pages "
                f"the KV cache: each sequence's span is a runtime value")
    if "mask_type" not in a:
        return f"custom call {target}: no mask_type attribute (causal or not is unknown)"
    shaped = _from_operands(operands, TE_LAYOUTS[layout_id])
    sizes: dict[str, int] = {}
    for size, names in TE_SIZES.items():
        named = next((int(a[n]) for n in names if n in a), None)
        if named is None and size not in shaped:
            return (f"custom call {target}: no {names[0]} attribute and operands that do not fit "
                    f"qkv_layout {layout_id}")
        sizes[size] = named if named is not None else shaped[size]
    B, T, S, N = sizes["B"], sizes["T"], sizes["S"], sizes["N"]
    causal = a["mask_type"] in TE_CAUSAL_MASKS
    seen = _window(a, T, S, causal)
    opcode = "fused-attention" + ("-backward" if "backward" in target else "") + (
        "-causal" if causal and seen is None else "")
    results = instr.shapes[:-1] if len(instr.shapes) > 1 else instr.shapes   # the workspace
    H = (sizes["H_qk"] + sizes["H_v"]) / 2
    return OpDesc(opcode, tuple(results), operands,
                  attention=(B, T, S if seen is None else seen, N, H))
