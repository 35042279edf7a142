"""TransformerEngine's fused attention custom calls (``harness.hlo.te_attention``).

The HLO is hand-written: one ``te_fused_attn_{forward,backward}_ffi`` call whose
``backend_config`` holds the attribute names TransformerEngine's JAX code lowers with
(NVIDIA/TransformerEngine ``transformer_engine/jax/cpp_extensions/attention.py``, the
``ffi.ffi_lowering(...)`` keywords, and ``transformer_engine/jax/csrc/extensions/attention.cpp``,
``FUSED_ATTN_FFI_GET_ATTRS``): ``head_dim`` at commit 9dddb36d5fd535cf8eb7d1de89b2d2efd87f477b
(v1.13), ``qk_head_dim``/``v_head_dim`` from commit 1ddfa0c6a468be6cfe02f2cb051110c94ba17a61
(v2.5) to d0067d0da6cb01811b8072a7d304f0e00344ce2b, ``bottom_right_diagonal`` from commit
c6a92a4dced73ffabdd41d77bf3bfa2eb67f6f1c. ROCm/TransformerEngine as of commit
ac80527d28c6051794bbdf7db0941f88fb3c5dda still calls ``te_fused_attn_forward`` with an opaque
descriptor. Enum values (``NVTE_Mask_Type``, ``NVTE_QKV_Layout``) from
``transformer_engine/common/include/transformer_engine/fused_attn.h``.

Expected FLOPs are the book's attention count (QK^T and PV, 2·B·T·S·N·H each), half when causal,
2.5x backward, written out here.
"""
from __future__ import annotations

import math

import pytest

from harness import hlo, schema
from harness.hlo import calls
from predictions import rules

BF16, F32 = 2, 4
CAUSAL, NO_MASK, CAUSAL_BOTTOM_RIGHT = 2, 0, 4        # NVTE_Mask_Type
BS3HD, BSHD_BS2HD, SBHD_SBHD_SBHD, BSHD_BSHD_BSHD, T3HD = 5, 7, 4, 9, 10   # NVTE_QKV_Layout


def _shape(dtype: str, dims) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def _attrs(**a) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return f"{v:.6e} : f64" if isinstance(v, float) else f"{v} : i64"
    return "{" + ", ".join(f"{k} = {value(v)}" for k, v in sorted(a.items())) + "}"


def _module(target: str, operands, results, **attrs):
    """One custom call over parameters, its results plus a u8 workspace, as XLA prints it."""
    params = "\n".join(f"  %p{i} = {_shape(*s)} parameter({i})" for i, s in enumerate(operands))
    res = ", ".join(_shape(*s) for s in [*results, ("u8", (4096,))])
    args = ", ".join(f"%p{i}" for i in range(len(operands)))
    sig = ", ".join(f"p{i}: {_shape(*s)}" for i, s in enumerate(operands))
    text = (f"HloModule jit_step\n\nENTRY %main ({sig}) -> {_shape(*results[0])} {{\n{params}\n"
            f"  %cc = ({res}) custom-call({args}), custom_call_target=\"{target}\", "
            f"api_version=API_VERSION_TYPED_FFI, backend_config={_attrs(**attrs)}\n"
            f"  ROOT %out = {_shape(*results[0])} get-tuple-element(%cc), index=0\n}}\n")
    module = hlo.parse_module(text)
    return module, module.instruction("cc")


def _bytes(*shapes) -> int:
    return sum(math.prod(d) * {"bf16": BF16, "f32": F32, "u64": 8}[t] for t, d in shapes)


# the MI355X train step's shape: packed QKV bf16[2,2048,3,16,128], causal
B, T, N, H = 2, 2048, 16, 128
S = T
QKV, EMPTY = ("bf16", (B, T, 3, N, H)), ("bf16", (0,))
OUT, STATS, RNG = ("bf16", (B, T, N, H)), ("f32", (B, N, T, 1)), ("u64", (2,))
V25 = dict(input_batch=B, q_max_seqlen=T, kv_max_seqlen=S, attn_heads=N, num_gqa_groups=N,
           qk_head_dim=H, v_head_dim=H, mask_type=CAUSAL, qkv_layout=BS3HD, window_size_left=-1,
           window_size_right=-1, dropout_probability=0.0, is_training=True)


def test_packed_qkv_causal_forward():
    module, cc = _module("te_fused_attn_forward_ffi", [QKV, EMPTY, EMPTY], [OUT, STATS, RNG], **V25)
    d = hlo.to_desc(cc, module)
    assert d.opcode == "fused-attention-causal"
    c = rules.cost(d)
    assert c.flops == 4 * 2 * 2048 * 2048 * 16 * 128 / 2
    # Q K V read once, O, the fp32 softmax statistics and the RNG state written; no workspace
    assert c.hbm_bytes == 2 * 2048 * 3 * 16 * 128 * BF16 + 2 * 2048 * 16 * 128 * BF16 \
        + 2 * 16 * 2048 * F32 + 2 * 8


def test_packed_qkv_causal_backward():
    # operands q, k, v, bias, softmax_aux, rng_state, output, doutput; results dqkv, dk, dv, dbias
    ops = [QKV, EMPTY, EMPTY, EMPTY, STATS, RNG, OUT, OUT]
    module, cc = _module("te_fused_attn_backward_ffi", ops, [QKV, EMPTY, EMPTY, EMPTY], **V25)
    d = hlo.to_desc(cc, module)
    assert d.opcode == "fused-attention-backward-causal"
    c = rules.cost(d)
    assert c.flops == 2.5 * 4 * 2 * 2048 * 2048 * 16 * 128 / 2
    assert c.hbm_bytes == _bytes(QKV, STATS, RNG, OUT, OUT, QKV)


def test_v1_13_head_dim_separate_gqa_no_mask():
    K = 4
    a = {**V25, "num_gqa_groups": K, "mask_type": NO_MASK, "qkv_layout": BSHD_BSHD_BSHD}
    del a["qk_head_dim"], a["v_head_dim"]
    a["head_dim"] = H
    kv = ("bf16", (B, S, K, H))
    module, cc = _module("te_fused_attn_forward_ffi", [OUT, kv, kv], [OUT, STATS, RNG], **a)
    d = hlo.to_desc(cc, module)
    assert d.opcode == "fused-attention"
    assert rules.cost(d).flops == 4 * B * T * S * N * H      # N query heads, not K


def test_qk_and_v_head_dims_differ():
    Hqk, Hv = 192, 128                                       # multi-head latent attention
    a = {**V25, "qk_head_dim": Hqk, "v_head_dim": Hv, "qkv_layout": BSHD_BSHD_BSHD}
    q, k, v = ("bf16", (B, T, N, Hqk)), ("bf16", (B, S, N, Hqk)), ("bf16", (B, S, N, Hv))
    module, cc = _module("te_fused_attn_forward_ffi", [q, k, v], [("bf16", (B, T, N, Hv))], **a)
    c = rules.cost(hlo.to_desc(cc, module))
    assert c.flops == (2 * B * T * S * N * Hqk + 2 * B * T * S * N * Hv) / 2


def test_sliding_window_counts_the_keys_each_query_sees():
    W = 512                    # window_size_left=511: a query sees itself and the 511 before it
    a = {**V25, "window_size_left": W - 1, "window_size_right": 0}
    module, cc = _module("te_fused_attn_forward_ffi", [QKV, EMPTY, EMPTY], [OUT, STATS, RNG], **a)
    # queries 0..511 see i+1 keys, the other 1536 see 512 each
    pairs = W * (W + 1) // 2 + (T - W) * W
    assert rules.cost(hlo.to_desc(cc, module)).flops == 4 * B * pairs * N * H
    module, cc = _module("te_fused_attn_backward_ffi", [QKV, EMPTY, EMPTY, EMPTY, STATS, RNG, OUT,
                                                        OUT], [QKV, EMPTY, EMPTY, EMPTY], **a)
    assert rules.cost(hlo.to_desc(cc, module)).flops == 2.5 * 4 * B * pairs * N * H


def test_a_window_wider_than_the_keys_is_the_plain_causal_mask():
    a = {**V25, "window_size_left": 4096, "window_size_right": 0}
    module, cc = _module("te_fused_attn_forward_ffi", [QKV, EMPTY, EMPTY], [OUT, STATS, RNG], **a)
    d = hlo.to_desc(cc, module)
    assert d.opcode == "fused-attention-causal"
    assert rules.cost(d).flops == 4 * B * T * S * N * H / 2


@pytest.mark.parametrize("aligned_by", ["mask", "bottom_right_diagonal"])
def test_bottom_right_window_over_longer_keys(aligned_by):
    Tq, Sk, W = 256, 1024, 128   # query i sits at key i + 768; it sees keys i+768-127 .. i+768
    mask = CAUSAL_BOTTOM_RIGHT if aligned_by == "mask" else CAUSAL
    a = {**V25, "q_max_seqlen": Tq, "kv_max_seqlen": Sk, "mask_type": mask,
         "qkv_layout": BSHD_BSHD_BSHD, "window_size_left": W - 1, "window_size_right": 0}
    if aligned_by == "bottom_right_diagonal":
        a["bottom_right_diagonal"] = True
    q, kv = ("bf16", (B, Tq, N, H)), ("bf16", (B, Sk, N, H))
    module, cc = _module("te_fused_attn_forward_ffi", [q, kv, kv], [q], **a)
    assert rules.cost(hlo.to_desc(cc, module)).flops == 4 * B * Tq * W * N * H


def test_sizes_from_operands_kv_packed():
    Tq, Sk, K, Hd = 1024, 4096, 4, 64
    q, kv = ("bf16", (B, Tq, N, Hd)), ("bf16", (B, Sk, 2, K, Hd))
    module, cc = _module("te_fused_attn_forward_ffi", [q, kv, EMPTY], [q],
                         mask_type=NO_MASK, qkv_layout=BSHD_BS2HD)
    assert rules.cost(hlo.to_desc(cc, module)).flops == 4 * B * Tq * Sk * N * Hd


def test_sizes_from_operands_sbhd_separate():
    Tq, Sk, Bs, Nq, K = 512, 768, 3, 8, 2
    q, k, v = ("bf16", (Tq, Bs, Nq, 64)), ("bf16", (Sk, Bs, K, 64)), ("bf16", (Sk, Bs, K, 32))
    module, cc = _module("te_fused_attn_forward_ffi", [q, k, v], [("bf16", (Tq, Bs, Nq, 32))],
                         mask_type=NO_MASK, qkv_layout=SBHD_SBHD_SBHD)
    c = rules.cost(hlo.to_desc(cc, module))
    assert c.flops == 2 * Bs * Tq * Sk * Nq * 64 + 2 * Bs * Tq * Sk * Nq * 32


def test_packed_qkv_without_layout_or_sizes_read_from_its_shape():
    module, cc = _module("te_fused_attn_forward_ffi", [QKV, EMPTY, EMPTY], [OUT, STATS, RNG],
                         mask_type=CAUSAL)
    assert rules.cost(hlo.to_desc(cc, module)).flops == 4 * B * T * S * N * H / 2


@pytest.mark.parametrize("target, attrs, operands, says", [
    ("te_fused_attn_forward_ffi", {k: v for k, v in V25.items() if k != "mask_type"},
     [QKV, EMPTY, EMPTY], "no mask_type attribute"),
    ("te_fused_attn_forward_ffi", {"mask_type": CAUSAL, "qkv_layout": BSHD_BSHD_BSHD},
     [("bf16", (4096, 16, 128))] * 3, "no input_batch attribute"),
    ("te_fused_attn_forward_ffi", {**V25, "qkv_layout": T3HD}, [QKV, EMPTY, EMPTY],
     "qkv_layout 10 packs sequences"),
    ("te_fused_attn_forward", {}, [QKV, EMPTY, EMPTY], "no mask_type attribute"),
])
def test_what_stays_unpriced_names_what_it_lacked(target, attrs, operands, says):
    module, cc = _module(target, operands, [OUT, STATS, RNG], **attrs)
    why = calls.why_unmodeled(cc)
    assert why.startswith(f"custom call {target}: ") and says in why
    assert not rules.cost(hlo.to_desc(cc, module)).modeled


def test_rows_are_attention_with_predictions():
    module, _ = _module("te_fused_attn_forward_ffi", [QKV, EMPTY, EMPTY], [OUT, STATS, RNG], **V25)
    df = hlo.hlo_costs(module, "h100")
    (row,) = df[df[schema.OPCODE] == "custom-call"].to_dict("records")
    assert row[schema.CATEGORY] == "attention" and row[schema.BOUND] != schema.UNMODELED
    assert row[schema.FLOPS] == 4 * B * T * S * N * H / 2
