"""harness.hlo parsing: every syntax XLA prints, on captured and hand-written fixtures.

Captured fixtures (``tests/fixtures/hlo/<program>.txt``) come from ``programs.py`` on 8 virtual
CPU devices; ``tpu_style``/``gpu_style``/``bare_style``/``nested_loops`` are hand-written in the
style XLA prints for other backends and for its own tests.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from harness import hlo
from harness.errors import HarnessError
from harness.hlo.attrs import replica_groups
from predictions.rules import Shape

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "hlo"


def load(name: str) -> hlo.Module:
    return hlo.parse_module((FIXTURES / f"{name}.txt").read_text())


def test_error_type_is_a_harness_error():
    assert issubclass(hlo.HloParseError, HarnessError)


# --- module structure -------------------------------------------------------------------------
def test_captured_module_header_blocks_and_entry():
    m = load("matmul_allreduce_mesh")
    assert m.name == "jit__lambda"
    assert m.num_partitions == 8 and m.num_devices == 8
    assert m.entry.name == "main.0_spmd" and m.entry.is_entry
    # FileNames/FunctionNames/FileLocations/StackFrames are skipped, not computations
    assert set(m.computations) == {"add.clone", "fused_computation", "main.0_spmd"}
    assert m.entry.root.name == "all-reduce" and m.entry.root.is_root


def test_entry_instruction_names_are_trace_names():
    # The CPU trace names ops ynn_fusion / all-reduce: the entry instruction names, no '%'.
    names = [i.name for i in load("matmul_allreduce_mesh").entry.instructions]
    assert names == ["param", "param.1", "ynn_fusion", "all-reduce"]


def test_dot_dimension_numbers_and_operand_shapes():
    m = load("matmul_allreduce_mesh")
    dot = m.computation("fused_computation").root
    assert dot.opcode == "dot"
    assert dot.attrs["lhs_contracting_dims"] == (1,) and dot.attrs["rhs_contracting_dims"] == (0,)
    # per device: A[256, 512/4] . B[512/4, 256]
    assert dot.operand_shapes == ((Shape("f32", (256, 128)),), (Shape("f32", (128, 256)),))
    assert dot.shapes == (Shape("f32", (256, 256)),)


def test_fusion_kind_calls_metadata_and_backend_config():
    fusion = load("matmul_allreduce_mesh").entry.by_name["ynn_fusion"]
    assert fusion.opcode == "fusion"
    assert fusion.attrs["kind"] == "kCustom"
    assert fusion.called("calls") == ("fused_computation",)
    assert fusion.op_name == "jit(<lambda>)/dot_general"
    assert fusion.backend_config()["fusion_config"] == {"kind": "__ynn_fusion"}
    assert fusion.operand_names == ("param", "param.1")


def test_all_reduce_mesh_form_names_its_axes():
    ar = load("matmul_allreduce_mesh").entry.by_name["all-reduce"]
    groups = ar.attrs["replica_groups"]
    assert groups.kind == "mesh"
    assert groups.mesh == (("axis_0", 1), ("axis_1", 4), ("axis_2", 2))
    assert groups.axes == ("axis_1",) and groups.axis_sizes == (4,)
    assert groups.group_size == 4 and groups.num_groups == 8 // 4
    assert ar.called("to_apply") == ("add.clone",)


def test_explicit_groups_permute_pairs_and_tuple_results():
    m = load("shardmap_permute_a2a")
    permute = m.entry.by_name["ppermute.3"]
    assert permute.opcode == "collective-permute"
    assert permute.attrs["source_target_pairs"] == tuple((i, (i + 1) % 8) for i in range(8))
    a2a = m.entry.by_name["all-to-all"]
    assert a2a.shapes == (Shape("f32", (8, 128)),) * 8  # tuple flattened to its 8 leaves
    assert a2a.attrs["replica_groups"].groups == (tuple(range(8)),)
    assert len(a2a.operand_names) == 8  # /*index=5*/ comments are not operands
    assert a2a.operand_shapes[5] == (Shape("f32", (8, 128)),)


def test_all_gather_and_reduce_scatter():
    m = load("shardmap_ag_rs")
    ag = next(i for i in m.entry.instructions if i.opcode == "all-gather")
    rs = next(i for i in m.entry.instructions if i.opcode == "reduce-scatter")
    assert ag.attrs["dimensions"] == (0,) and ag.attrs["replica_groups"].group_size == 4
    assert rs.attrs["replica_groups"].groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert rs.operand_shapes == (ag.shapes,)


def test_while_attributes_and_known_trip_count_config():
    loop = next(i for i in load("fori_loop").entry.instructions if i.opcode == "while")
    assert loop.called("condition") and loop.called("body")
    assert loop.backend_config()["known_trip_count"] == {"n": "5"}
    assert loop.shapes == (Shape("s32", ()), Shape("f32", (128, 256)), Shape("f32", (256, 256)))


# --- other backends' syntax (hand-written) ---------------------------------------------------
def test_tpu_tiled_layouts_memory_spaces_and_shaped_operands():
    m = load("tpu_style")
    fusion = m.entry.by_name["fusion"]  # bf16[256,512]{1,0:T(8,128)(2,1)S(1)}
    assert fusion.shapes == (Shape("bf16", (256, 512)),) and fusion.memory_spaces == (1,)
    assert fusion.operand_names == ("param", "param.1")  # operands printed with shapes
    add = m.computation("add.1").root  # scalars laid out {:T(256)}
    assert add.shapes == (Shape("bf16", ()),) and add.operand_names == ("x", "y")
    start = m.entry.by_name["copy-start"]
    assert start.memory_spaces == (1, 0, 2)
    root = m.entry.root
    assert root.name == "tuple.40" and len(root.operand_names) == 4


def test_tpu_iota_groups_and_async_pairs():
    m = load("tpu_style")
    e = m.entry.by_name
    assert e["all-gather-start"].attrs["replica_groups"].groups == (tuple(range(8)),)
    assert e["all-gather-done"].operand_names == ("all-gather-start",)
    assert e["all-reduce-start"].attrs["replica_groups"].groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    rs = m.computation("all-reduce-scatter.3").root
    expected = tuple(map(tuple, np.arange(8).reshape(2, 4).T.reshape(4, 2).tolist()))
    assert rs.attrs["replica_groups"].groups == expected == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_quoted_backend_config_and_strings_with_commas():
    call = load("tpu_style").entry.by_name["custom-call.5"]
    assert call.attrs["custom_call_target"] == "tpu_custom_call"
    assert call.op_name == "jit(step)/attention, softmax=x/pallas_call"
    assert call.backend_config() == {"custom_call_config": {"body": "abc, def=1"}}


def test_gpu_custom_call_mesh_device_ids_subaxis_and_empty_groups():
    m = load("gpu_style")
    e = m.entry.by_name
    assert e["custom-call.1"].attrs["custom_call_target"] == "__cublas$gemm"
    assert e["custom-call.1"].shapes == (Shape("f32", (128, 512)), Shape("s8", (4194304,)))
    groups = e["all-reduce-start"].attrs["replica_groups"]
    assert groups.kind == "mesh" and groups.mesh == (("x", 4), ("y", 2))
    assert groups.axis_sizes == (2,) and groups.group_size == 2  # sub-axis x:(1)2
    assert "device_ids" not in e["all-reduce-start"].attrs
    everyone = m.computation("async_computation").root.attrs["replica_groups"]
    assert everyone.kind == "all"
    assert e["conditional.1"].called("branch_computations") == ("branch_0", "branch_1")
    conv = e["convolution.4"]
    assert conv.attrs["dim_labels"] == ("b01f", "01io", "b01f")
    assert conv.attrs["window"] == {"size": (3, 3), "pad": ((1, 1), (1, 1))}


def test_bare_names_without_percent_signs():
    m = load("bare_style")
    assert m.replica_count == 4 and m.num_devices == 4
    crs = m.entry.by_name["crs"]
    assert crs.operand_names == ("input",) and crs.called("to_apply") == ("add",)
    assert m.entry.by_name["t"].operand_names == ("crs", "input")
    assert m.entry.root.name == "r"


# A Pallas TPU kernel as libtpu prints it: its kernel_metadata's JSON on lines of its own
# (splash attention's block sizes; tests/fixtures/tpu/splash_llama_train has the real ones).
MULTI_LINE = "\n".join([
    "HloModule m, entry_computation_layout={(bf16[4,128]{1,0})->bf16[4,128]{1,0}}",
    "",
    "ENTRY %main (q: bf16[4,128]) -> bf16[4,128] {",
    "  %q = bf16[4,128]{1,0} parameter(0)",
    "  %splash_mha_fwd_no_residuals.1 = bf16[4,128]{1,0} custom-call(%q), "
    'custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={',
    '"xprof_metadata":"{\\"block_q\\": 512, \\"q_layout\\": 1}"',
    '}}, metadata={op_name="jit(f)/pallas_call"}',
    "  ROOT %copy = bf16[4,128]{1,0} copy(%splash_mha_fwd_no_residuals.1)",
    "}",
    ""])


def test_an_instruction_over_several_lines_is_one_instruction():
    m = hlo.parse_module(MULTI_LINE)
    call = m.entry.by_name["splash_mha_fwd_no_residuals.1"]
    assert call.attrs["custom_call_target"] == "tpu_custom_call"
    assert '\\"block_q\\": 512' in str(call.attrs["frontend_attributes"])
    assert call.op_name == "jit(f)/pallas_call" and call.line == 5
    assert m.entry.root.operand_names == ("splash_mha_fwd_no_residuals.1",)


def test_an_instruction_that_never_closes_names_its_first_line():
    text = MULTI_LINE.replace("}}, metadata", "}, metadata")
    with pytest.raises(hlo.HloParseError, match=r"^line 5: "):
        hlo.parse_module(text)


# --- replica groups, directly ----------------------------------------------------------------
@pytest.mark.parametrize("text, size, groups", [
    ("{{0,1},{2,3}}", 2, ((0, 1), (2, 3))),
    ("{}", 0, None),
    ("[2,4]<=[8]", 4, tuple(map(tuple, np.arange(8).reshape(2, 4).tolist()))),
    ("[4,2]<=[2,4]T(1,0)", 2,
     tuple(map(tuple, np.arange(8).reshape(2, 4).T.reshape(4, 2).tolist()))),
    ("[2,8]<=[2,2,4]T(2,0,1)", 8,
     tuple(map(tuple, np.arange(16).reshape(2, 2, 4).transpose(2, 0, 1).reshape(2, 8).tolist()))),
])
def test_replica_group_syntaxes(text, size, groups):
    parsed = replica_groups(text)
    assert parsed.group_size == size
    if groups is not None:
        assert parsed.groups == groups


def test_mesh_groups_over_two_axes():
    parsed = replica_groups("mesh['data'=2,'model'=4,'seq'=2] {'data','seq'}")
    assert parsed.axes == ("data", "seq") and parsed.axis_sizes == (2, 2)
    assert parsed.group_size == 2 * 2 and parsed.num_groups == 16 // 4


# --- malformed text: one clear error ---------------------------------------------------------
@pytest.mark.parametrize("mutate, expected", [
    (lambda t: t[: t.index("ROOT %all-reduce")], "expected '}' closing computation"),
    (lambda t: t[: t.index("ENTRY")], "expected an ENTRY computation"),
    (lambda t: t.replace("f32[256,128]{1,0} parameter(0)", "f32[256,128 parameter(0)"),
     "line"),
    (lambda t: t.replace("all-reduce(%ynn_fusion)", "all-reduce(%nope)"), "%nope"),
    (lambda t: t.replace("calls=%fused_computation", "calls=%missing"), "missing"),
    (lambda t: t.replace("f32[256,256]{1,0} all-reduce", "q99[256,256]{1,0} all-reduce"),
     "unknown element type"),
    (lambda t: t.replace("{'axis_1'}", "{'axis_9'}"), "axis_9"),
    (lambda t: t.replace("lhs_contracting_dims={1}", "lhs_contracting_dims={x}"),
     "lhs_contracting_dims"),
    (lambda t: t.replace("HloModule jit__lambda", "HloModul jit__lambda"), "line 1"),
    (lambda t: t + "\n%dangling = f32[] constant(0)\n", "computation header"),
])
def test_malformed_text_names_line_and_expectation(mutate, expected):
    text = mutate((FIXTURES / "matmul_allreduce_mesh.txt").read_text())
    with pytest.raises(hlo.HloParseError, match=r"^line \d+: ") as info:
        hlo.parse_module(text)
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_not_text_and_empty_text():
    with pytest.raises(hlo.HloParseError):
        hlo.parse_module(b"HloModule x")  # type: ignore[arg-type]
    with pytest.raises(hlo.HloParseError, match="ENTRY"):
        hlo.parse_module("")


def test_large_module_parses_quickly():
    """~40k instruction lines: a scaled-down stand-in for a 70B train step (hundreds of
    thousands of lines parse at the same per-line rate)."""
    import time
    body = (FIXTURES / "mlp_train.txt").read_text()
    header, rest = body.split("\n", 1)
    comps = rest[rest.index("\n%"):rest.index("\nENTRY")]
    copies = [comps.replace("%", f"%c{k}_") for k in range(300)]
    text = "\n".join([header, *copies, rest[rest.index("\n%"):]])
    start = time.perf_counter()
    m = hlo.parse_module(text)
    elapsed = time.perf_counter() - start
    assert len(m.computations) > 300 * 12
    assert elapsed < 30, f"parsing {text.count(chr(10))} lines took {elapsed:.1f} s"
