"""predictions.rules: per-opcode costs (roofline.md, profiling.md, sharding.md conventions)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictions import collectives, roofline
from predictions.rules import (
    CATEGORY,
    RULES,
    UNMODELED,
    Cost,
    OpDesc,
    Shape,
    category,
    cost,
    fusion_cost,
)


def f32(*dims):
    return Shape("f32", tuple(dims))


def bf16(*dims):
    return Shape("bf16", tuple(dims))


def op(opcode, results=(), operands=(), **kw):
    return OpDesc(opcode, tuple(results), tuple(operands), **kw)


# --- invariants over every rule ----------------------------------------------------------------
shapes = st.builds(Shape, st.sampled_from(["f32", "bf16", "s32", "pred", "s8"]),
                   st.lists(st.integers(1, 6), max_size=3).map(tuple))


@settings(max_examples=300, deadline=None)
@given(opcode=st.sampled_from(sorted(RULES)), results=st.lists(shapes, min_size=1, max_size=2),
       operands=st.lists(shapes, min_size=1, max_size=3),
       group=st.lists(st.integers(1, 8), max_size=2).map(tuple))
def test_every_rule_gives_non_negative_costs(opcode, results, operands, group):
    desc = op(opcode, results, operands, group_axes=group)
    c = cost(desc)
    assert c.flops >= 0 and c.hbm_bytes >= 0 and c.comm_bytes >= 0
    assert all(math.isfinite(x) for x in (c.flops, c.hbm_bytes, c.comm_bytes))
    if c.comm_bytes:
        assert c.collective in collectives.TIME_BY_COLLECTIVE and c.group_axes == group
    # bytes never exceed reading every operand and writing every result, twice over
    assert c.hbm_bytes <= 2 * (desc.operand_bytes + desc.result_bytes) + 1e-9
    t = roofline.op_time(c, "cpu")
    assert t.predicted_s == max(t.t_compute_s, t.t_memory_s, t.t_comm_s) >= 0


def test_every_opcode_the_issue_names_has_a_rule():
    named = """dot convolution add multiply subtract divide maximum minimum exponential log tanh
    rsqrt sqrt negate abs compare select convert clamp power logistic reduce reduce-window copy
    transpose broadcast slice dynamic-slice dynamic-update-slice concatenate pad gather scatter
    reverse iota sort parameter constant tuple get-tuple-element bitcast reshape after-all
    partition-id replica-id opt-barrier all-gather reduce-scatter all-reduce all-to-all
    collective-permute all-gather-start all-reduce-start collective-permute-start
    all-gather-done all-reduce-done collective-permute-done""".split()
    missing = [name for name in named if name not in RULES]
    assert not missing
    assert set(RULES) <= set(CATEGORY) | {name for name in RULES if RULES[name](op(name)) == Cost()}


# --- unmodeled -----------------------------------------------------------------------------------
@pytest.mark.parametrize("opcode", ["custom-call", "fusion", "while", "fft", "frobnicate"])
def test_unknown_opcodes_are_unmodeled_never_zero(opcode):
    c = cost(op(opcode, [f32(4)], [f32(4)]))
    assert c == UNMODELED and c.modeled is False
    assert opcode in c.notes[0]
    assert roofline.op_time(c, "tpu-v5e").bound == "unmodeled"


# --- matmuls -------------------------------------------------------------------------------------
def test_dot_counts_two_flops_per_multiply_add():
    B, D, F = 16, 32, 8
    c = cost(op("dot", [bf16(B, F)], [bf16(B, D), bf16(D, F)],
                lhs_contracting=(1,), rhs_contracting=(0,)))
    assert c.flops == 2 * B * D * F  # roofline.md: 2BDF
    assert c.hbm_bytes == 2 * B * D + 2 * D * F + 2 * B * F
    # batch and contracting dims counted once: [b,m,k] . [b,k,n] -> 2bmkn
    b, m, k, n = 3, 5, 7, 11
    c = cost(op("dot", [f32(b, m, n)], [f32(b, m, k), f32(b, k, n)], lhs_contracting=(2,),
                rhs_contracting=(1,), lhs_batch=(0,), rhs_batch=(0,)))
    assert c.flops == 2 * b * m * k * n
    # nothing contracted: an elementwise/outer product, one FLOP per output element
    c = cost(op("dot", [f32(b, m, n)], [f32(b, m), f32(b, n)], lhs_batch=(0,), rhs_batch=(0,)))
    assert c.flops == b * m * n
    assert cost(op("dot", [f32(4)], [f32(4)])).modeled is False


def test_convolution_as_a_dot_over_the_kernel():
    # NHWC x HWIO -> NHWC, 3x3 kernel, 16 -> 32 features, output 2x8x8x32
    out, kernel = f32(2, 8, 8, 32), f32(3, 3, 16, 32)
    c = cost(op("convolution", [out], [f32(2, 10, 10, 16), kernel], rhs_contracting=(0, 1, 2)))
    assert c.flops == 2 * (2 * 8 * 8 * 32) * (3 * 3 * 16)
    guessed = cost(op("convolution", [out], [f32(2, 10, 10, 16), kernel]))
    assert guessed.flops == c.flops and "guessed" in guessed.notes[0]


def test_convolution_backward_passes_do_the_forward_multiply_adds():
    # transformers.md: 2NPM forward, 2NPM for the input gradient, 2NPM for the weight gradient
    x, kernel, y = f32(2, 10, 10, 16), f32(3, 3, 16, 32), f32(2, 8, 8, 32)
    k = dict(rhs_contracting=(0, 1, 2))
    forward = cost(op("convolution", [y], [x, kernel], **k))
    dx = cost(op("convolution-backward-input", [x], [y, kernel], **k))     # (dy, W) -> dx
    dw = cost(op("convolution-backward-filter", [kernel], [x, y], **k))    # (x, dy) -> dW
    assert forward.flops == dx.flops == dw.flops == 2 * (2 * 8 * 8 * 32) * (3 * 3 * 16)
    assert forward.hbm_bytes == dx.hbm_bytes == dw.hbm_bytes  # the same three arrays move
    assert not cost(op("convolution-backward-filter", [], [x, y], **k)).modeled


def test_fused_attention_from_named_sizes_and_kernel_estimates():
    sizes = (2, 512, 1024, 8, 64)  # B, T, S, N, H
    c = cost(op("fused-attention-causal", [bf16(2, 512, 8, 64)], [bf16(2, 512, 8, 64)],
                attention=sizes))
    assert c.flops == 4 * math.prod(sizes) * 0.5
    est = cost(op("kernel-estimate", [bf16(4)], [bf16(4)], estimate=(1e9, 3e6)))
    assert (est.flops, est.hbm_bytes) == (1e9, 3e6)  # the kernel's word, not its shapes
    assert not cost(op("kernel-estimate", [bf16(4)], [bf16(4)])).modeled


# --- elementwise, reductions, data movement ------------------------------------------------------
@pytest.mark.parametrize("opcode", ["add", "multiply", "exponential", "tanh", "compare", "select",
                                    "convert", "rsqrt", "logistic", "power", "clamp"])
def test_elementwise_is_one_flop_per_output_element(opcode):
    c = cost(op(opcode, [f32(8, 16)], [f32(8, 16), f32(8, 16)]))
    assert c.flops == 8 * 16
    assert c.hbm_bytes == 3 * 8 * 16 * 4


def test_reductions_count_input_elements():
    c = cost(op("reduce", [f32(8)], [f32(8, 16), f32()]))
    assert c.flops == 8 * 16 and c.hbm_bytes == (8 * 16 + 1 + 8) * 4
    # variadic reduce: two inputs, two inits
    c = cost(op("reduce", [f32(8), f32(8)], [f32(8, 16), f32(8, 16), f32(), f32()]))
    assert c.flops == 2 * 8 * 16
    assert cost(op("reduce-window", [f32(4, 8)], [f32(8, 16), f32()])).flops == 8 * 16


def test_data_movement_has_bytes_and_no_flops():
    for opcode in ("copy", "transpose", "reverse", "pad", "concatenate"):
        c = cost(op(opcode, [f32(16, 8)], [f32(8, 16)]))
        assert c.flops == 0 and c.hbm_bytes == 2 * 8 * 16 * 4, opcode
    assert cost(op("broadcast", [f32(8, 16)], [f32(16)])).hbm_bytes == (8 * 16 + 16) * 4
    assert cost(op("iota", [Shape("s32", (1024,))])).hbm_bytes == 4096
    # slices read only what they return
    assert cost(op("slice", [f32(2, 16)], [f32(64, 16)])).hbm_bytes == 2 * 2 * 16 * 4
    idx = Shape("s32", ())
    assert cost(op("dynamic-slice", [f32(2, 16)], [f32(64, 16), idx, idx])).hbm_bytes == \
        2 * 2 * 16 * 4 + 2 * 4
    assert cost(op("gather", [f32(10, 16)], [f32(1000, 16), Shape("s32", (10, 1))])).hbm_bytes \
        == 2 * 10 * 16 * 4 + 10 * 4


def test_in_place_updates_count_only_the_update():
    idx = Shape("s32", ())
    c = cost(op("dynamic-update-slice", [f32(4096, 128)], [f32(4096, 128), f32(1, 128), idx, idx]))
    assert c.flops == 0 and c.hbm_bytes == 2 * 128 * 4 + 2 * 4
    c = cost(op("scatter", [f32(1000, 16)],
                [f32(1000, 16), Shape("s32", (10, 1)), f32(10, 16)]))
    assert c.hbm_bytes == 10 * 4 + 2 * 10 * 16 * 4


def test_sort_is_n_log_n_compares():
    c = cost(op("sort", [f32(4, 1024)], [f32(4, 1024)], dimensions=(1,)))
    assert c.flops == 4 * 1024 * 10
    assert cost(op("sort", [f32(1024, 4)], [f32(1024, 4)], dimensions=(0,))).flops == 4 * 1024 * 10
    assert cost(op("sort", [f32(8, 1)], [f32(8, 1)])).flops == 0


@pytest.mark.parametrize("opcode", ["parameter", "constant", "tuple", "get-tuple-element",
                                    "bitcast", "reshape", "after-all", "partition-id",
                                    "replica-id", "opt-barrier", "all-gather-done"])
def test_bookkeeping_is_free_but_modeled(opcode):
    c = cost(op(opcode, [f32(1024)], [f32(1024)]))
    assert c == Cost() and c.modeled


# --- collectives ---------------------------------------------------------------------------------
def test_collective_costs_follow_the_collectives_convention():
    g = (8,)
    ag = cost(op("all-gather", [f32(64)], [f32(8)], group_axes=g))
    assert (ag.collective, ag.comm_bytes, ag.group_axes) == ("all-gather", 64 * 4, g)
    assert ag.hbm_bytes == (8 + 64) * 4 and ag.flops == 0
    rs = cost(op("reduce-scatter", [f32(8)], [f32(64)], group_axes=g))
    assert rs.comm_bytes == 64 * 4 and rs.flops == 64 * 7 / 8  # the additions
    ar = cost(op("all-reduce", [f32(64)], [f32(64)], group_axes=(4, 2)))
    assert ar.comm_bytes == 64 * 4 and ar.group_axes == (4, 2)
    a2a = cost(op("all-to-all", [f32(64)], [f32(64)], group_axes=g))
    assert a2a.comm_bytes == 8 * 64 * 4  # the whole array exchanged across the group
    cp = cost(op("collective-permute", [f32(64)], [f32(64)]))
    assert (cp.collective, cp.comm_bytes) == ("collective-permute", 64 * 4)
    # async start: the result tuple (input, output) counts the output once
    start = cost(op("all-gather-start", [f32(8), f32(64)], [f32(8)], group_axes=g))
    assert start.comm_bytes == ag.comm_bytes and start.hbm_bytes == ag.hbm_bytes


def test_collective_cost_times_like_the_collectives_module():
    V = 34e6 / 4  # per-device shard of sharding.md's 34 MB example
    c = cost(op("all-gather", [bf16(int(4 * V / 2))], [bf16(int(V / 2))], group_axes=(4,)))
    assert roofline.op_time(c, "tpu-v5e").t_comm_s == pytest.approx(
        collectives.all_gather(34e6, 4, "tpu-v5e"))


# --- fusions -------------------------------------------------------------------------------------
def test_fusion_sums_inner_flops_and_charges_outer_bytes():
    outer = op("fusion", [f32(8)], [f32(8, 16), f32(8, 16)])
    inner = [op("parameter", [f32(8, 16)]), op("parameter", [f32(8, 16)]),
             op("multiply", [f32(8, 16)], [f32(8, 16), f32(8, 16)]),
             op("constant", [f32()]),
             op("reduce", [f32(8)], [f32(8, 16), f32()])]
    c = fusion_cost(outer, inner)
    assert c.flops == 8 * 16 + 8 * 16
    assert c.hbm_bytes == (2 * 8 * 16 + 8) * 4 and c.modeled
    assert fusion_cost(outer, inner + [op("custom-call", [f32(8)])]).modeled is False


def test_in_place_update_fusion_moves_only_the_update():
    # a decode step's KV-cache write: fusion(cache, new_kv, i) -> cache with DUS as its root.
    # The HLO layer (harness.hlo.fusion_desc, which knows the updated parameter) hands
    # fusion_cost the bytes that move: the cache is neither operand nor result, the result is
    # the new rows.
    cache, new, idx = bf16(80, 8192, 1024), bf16(80, 1, 1024), Shape("s32", ())
    outer = op("fusion", [new], [new, idx])
    inner = [op("parameter", [cache]), op("parameter", [new]), op("parameter", [idx]),
             op("dynamic-update-slice", [cache], [cache, new, idx, idx, idx])]
    c = fusion_cost(outer, inner)
    # read the new rows and the index, write the new rows; the 1.3 GB cache stays put
    assert c.hbm_bytes == new.nbytes + idx.nbytes + new.nbytes
    assert c.hbm_bytes < cache.nbytes / 1000


def test_fusion_with_an_inner_collective_keeps_the_comm():
    # profiling.md: a kCustom fusion calling all-reduce-scatter
    outer = op("fusion", [bf16(8, 1024, 4096)], [bf16(8, 1024, 8192)])
    inner = [op("parameter", [bf16(8, 1024, 8192)]),
             op("reduce-scatter", [bf16(8, 1024, 4096)], [bf16(8, 1024, 8192)], group_axes=(2,))]
    c = fusion_cost(outer, inner)
    assert c.collective == "reduce-scatter" and c.comm_bytes == 2 * 8 * 1024 * 8192
    assert c.hbm_bytes == 2 * 8 * 1024 * (8192 + 4096)


# --- the algebra ---------------------------------------------------------------------------------
def test_cost_addition_and_scaling():
    a = Cost(flops=1, hbm_bytes=2, comm_bytes=3, collective="all-reduce", group_axes=(4,))
    b = Cost(flops=10, hbm_bytes=20)
    s = a + b
    assert (s.flops, s.hbm_bytes, s.comm_bytes) == (11, 22, 3)
    assert s.collective == "all-reduce" and s.group_axes == (4,)
    assert (b + a).flops == s.flops and a + Cost() == a
    assert 3 * a == a * 3 and (a * 3).comm_bytes == 9 and (a * 3).collective == "all-reduce"
    assert (a + UNMODELED).modeled is False
    with pytest.raises(TypeError):
        a + 1
    with pytest.raises(TypeError):
        a * "2"


def test_categories():
    assert category("dot") == "matmul" and category("all-reduce-start") == "collective"
    assert category("exponential") == "elementwise" and category("reduce") == "reduction"
    assert category("transpose") == "copy" and category("custom-call") == "other"
