"""What runs and how often: trip counts, the executed-op walk, and categories."""
from __future__ import annotations

import logging
import re

import pytest
from conftest import FIXTURES

from harness import hlo, schema


def text(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


def counts(m: hlo.Module) -> dict[str, int]:
    return {i.name: n for i, n in hlo.executed(m) if i.opcode not in hlo.STRUCTURAL}


def loop(m: hlo.Module, name: str | None = None) -> hlo.Instruction:
    return next(i for i, _ in hlo.executed(m) if i.opcode == "while" and name in (None, i.name))


# --- trip counts ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, n", [("fori_loop", 5), ("scan", 6)])
def test_trip_count_from_backend_config(name, n):
    m = hlo.parse_module(text(name))
    assert hlo.trip_count(m, loop(m)) == hlo.TripCount(n, "backend_config")


@pytest.mark.parametrize("name, n", [("fori_loop", 5), ("scan", 6)])
def test_trip_count_from_induction_when_config_is_absent(name, n):
    # Strip known_trip_count: the bound comes from the condition's fused compare against a
    # constant, the start from the init tuple (copy of constant 0), the step from the body's add.
    stripped = re.sub(r', backend_config=\{"dynamic_variables".*?\}\}', "", text(name))
    assert "known_trip_count" not in stripped
    m = hlo.parse_module(stripped)
    assert hlo.trip_count(m, loop(m)) == hlo.TripCount(n, "induction")


def test_self_referencing_init_does_not_hang():
    stripped = re.sub(r', backend_config=\{"dynamic_variables".*?\}\}', "", text("fori_loop"))
    looped = stripped.replace("%copy.7 = s32[] copy(%constant.5)", "%copy.7 = s32[] copy(%copy.7)")
    m = hlo.parse_module(looped)
    assert hlo.trip_count(m, loop(m)) == hlo.TripCount(1, "unknown")


def test_trip_counts_of_hand_written_loops(caplog):
    m = hlo.parse_module(text("nested_loops"))
    assert hlo.trip_count(m, loop(m, "outer_while")) == hlo.TripCount(3, "backend_config")
    # i = 0, 2, 4, 6, 8 while i <= 9
    assert hlo.trip_count(m, loop(m, "inner_while")) == hlo.TripCount(5, "induction")
    # 10 > i, i = 0..9 (constant on the left of the compare)
    assert hlo.trip_count(m, loop(m, "left_while")) == hlo.TripCount(10, "induction")
    with caplog.at_level(logging.WARNING):
        assert hlo.trip_count(m, loop(m, "open_while")) == hlo.TripCount(1, "unknown")
    assert "open_while" in caplog.text
    tpu = hlo.parse_module(text("tpu_style"))  # unfused compare LT 4, operands with shapes
    assert hlo.trip_count(tpu, loop(tpu)) == hlo.TripCount(4, "induction")


# --- executions per step ----------------------------------------------------------------------
def test_loop_bodies_are_multiplied_through_nesting():
    n = counts(hlo.parse_module(text("nested_loops")))
    assert n["outer_while"] == 1
    assert n["inner_while"] == 3
    assert n["inner_dot"] == 3 * 5
    assert n["ic.lt"] == 3 * (5 + 1)  # a condition runs once more than its body
    assert n["call.1"] == 3 and n["called_dot"] == 3  # call bodies run as ops
    assert n["left_exp"] == 10
    assert n["open_neg"] == 1


def test_loops_once_counts_bodies_once_like_cost_analysis():
    m = hlo.parse_module(text("nested_loops"))
    once = {i.name: c for i, c in hlo.executed(m, loops_once=True)}
    assert once["inner_dot"] == 1 and once["left_exp"] == 1 and once["ic.lt"] == 1


def test_executed_ops_of_a_captured_loop_are_the_trace_names():
    # The CPU trace of this program shows copy.*, while.5 once and ynn_fusion, wrapped_add,
    # wrapped_tanh 5 times per step; fusion internals never appear.
    n = counts(hlo.parse_module(text("fori_loop")))
    body = {k: v for k, v in n.items() if v == 5}
    assert set(body) == {"ynn_fusion", "wrapped_add", "wrapped_tanh"}
    assert "dot_general.2" not in n and "tanh.2" not in n


def test_fusion_bodies_and_reduction_computations_are_not_ops():
    m = hlo.parse_module(text("mlp_train"))
    names = set(counts(m))
    assert "add.1" not in names and "reduce.1" not in names  # to_apply / fused
    fusion = m.entry.by_name["ynn_fusion.1"]
    assert [i.opcode for i in hlo.fused_instructions(m, fusion)] == ["multiply", "reduce"]


def test_recursive_computation_is_a_parse_error():
    looped = text("nested_loops").replace("ROOT %called_dot = f32[64,64]{1,0} dot(%c.x, %c.x), "
                                          "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                                          "ROOT %again = f32[64,64]{1,0} call(%c.x), "
                                          "to_apply=%called")
    with pytest.raises(hlo.HloParseError, match="calls itself"):
        hlo.executed(hlo.parse_module(looped))


# --- categories -------------------------------------------------------------------------------
def cats(name: str) -> dict[str, str]:
    m = hlo.parse_module(text(name))
    return {i.name: hlo.category(m, i) for i, _ in hlo.executed(m)
            if i.opcode not in hlo.STRUCTURAL}


def test_categories_of_a_cpu_train_step():
    c = cats("mlp_train")
    assert all(v in schema.CATEGORIES for v in c.values())
    assert c["ynn_fusion.3"] == c["dot.4"] == "matmul"  # fusion holding a dot; bare dot
    assert c["ynn_fusion.1"] == "reduction"  # multiply + reduce
    assert c["broadcast_maximum_fusion"] == c["compare_select_fusion"] == "elementwise"
    assert c["all-reduce.3"] == "collective"
    assert c["wrapped_copy"] == "copy"


def test_categories_of_index_arithmetic_and_slices():
    c = cats("matmul_reducescatter")
    # multiply on scalars (partition id x 64) + dynamic-slice of an array: a copy, not arithmetic
    assert c["multiply_dynamic-slice_fusion"] == "copy"
    assert c["partition-id.1"] == "other"


def test_categories_of_other_backends():
    tpu = cats("tpu_style")
    assert tpu["fusion"] == "matmul"  # convolution dim_labels=bf_io->bf inside
    assert tpu["fusion.3"] == "collective"  # calls=%all-reduce-scatter.3
    assert tpu["all-gather-start"] == tpu["all-gather-done"] == "collective"
    assert tpu["copy-start"] == tpu["copy-done"] == "copy"
    assert tpu["custom-call.5"] == "attention"  # op_name mentions attention
    assert tpu["while.32"] == "other"
    gpu = cats("gpu_style")
    assert gpu["custom-call.1"] == "matmul"  # __cublas$gemm
    assert gpu["all-gather-start"] == gpu["all-gather-done"] == "collective"  # async wrapper
    assert gpu["fusion.7"] == "matmul"  # dot + exponential, no second dot: an activation
    assert gpu["convolution.4"] == "matmul" and gpu["reduce.8"] == "reduction"
    assert gpu["slice.5"] == "copy" and gpu["negate.b0"] == "elementwise"
