"""harness explain: each collective's source line, mesh axes and the book's reason.

Small programs on 8 CPU devices whose layouts force a known collective by the book's four
cases (book.md §4.1); the expected line is the test's own (``inspect``), the expected axis
what the partition specs name.
"""
import inspect
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness import schema
from harness.analysis.mesh import MeshError, parse_mesh
from harness.explain import collectives
from harness.explain.axes import mesh_axes
from harness.hlo import parse_module

MESH = {"X": 4, "Y": 2}
TPU = Path(__file__).parent / "fixtures" / "tpu"


def _mesh():
    return jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Auto,) * 2)


def _compiled(fn, *specs, shapes):
    mesh = _mesh()
    args = [jax.device_put(jnp.ones(s, jnp.float32), NamedSharding(mesh, p))
            for s, p in zip(shapes, specs)]
    return parse_module(jax.jit(fn).lower(*args).compile().as_text())


def _line(fn, text: str) -> str:
    """"<this file>:<line>" of the line of ``fn`` holding ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return f"{Path(__file__).name}:{first + next(i for i, s in enumerate(lines) if text in s)}"


def _only(table, kind: str):
    rows = table[table[schema.COLLECTIVE] == kind]
    assert len(rows) == 1, table[[schema.OP, schema.COLLECTIVE]]
    return rows.iloc[0]


# --- mesh axes: partition ids are row-major over the mesh (jax.sharding.Mesh.devices.flat) --

@pytest.mark.parametrize("groups,axes", [
    (((0, 2, 4, 6), (1, 3, 5, 7)), ("X",)),      # (i // 2, i % 2): X varies, Y fixed
    (((0, 1), (2, 3), (4, 5), (6, 7)), ("Y",)),
    ((tuple(range(8)),), ("X", "Y")),
    (((0, 1, 2, 3), (4, 5, 6, 7)), None),        # X in {0, 1} x Y: half of X, no whole axis
])
def test_groups_map_to_named_axes(groups, axes):
    assert mesh_axes(groups, MESH) == axes


def test_permute_pairs_map_to_the_axis_they_shift_along():
    ring_x = ((0, 2), (2, 4), (4, 6), (6, 0), (1, 3), (3, 5), (5, 7), (7, 1))
    assert mesh_axes(ring_x, MESH, pairs=True) == ("X",)


def test_mesh_flag_forms():
    assert parse_mesh("X=4,Y=2") == MESH
    assert parse_mesh("4x2") == MESH
    for bad in ("X=4,X=2", "4xq", "X=0"):
        with pytest.raises(MeshError, match="--mesh"):
            parse_mesh(bad)


# --- the four cases on 8 CPU devices -------------------------------------------------------

def _partial_sums(x, w):
    return x @ w  # the dot whose partial sums are all-reduced


def test_both_operands_sharded_on_contracting_dim_is_case_3_over_x():
    # A[I, J_X] . B[J_X, K] -> C[I, K]{U_X}: AllReduce_X (book §4.1 case 3)
    m = _compiled(_partial_sums, P(None, "X"), P("X", None), shapes=[(64, 128), (128, 32)])
    row = _only(collectives(m, mesh=MESH), "all-reduce")
    assert row[schema.MESH_AXES] == "X"
    assert row[schema.REASON] == "case 3: partial sums"
    assert row[schema.SOURCE_LINE].endswith(_line(_partial_sums, "x @ w"))
    assert row[schema.SOURCE_OP].endswith("dot_general")
    # the partial sums C[64, 32] f32 on each device: V = 64 * 32 * 4 bytes
    assert row[schema.DEVICE_BYTES] == 64 * 32 * 4
    assert "reduce-scatter" in row[schema.FIX]


def _second_on_y(x, w):
    h = jnp.tanh(x @ w)
    return h @ w.T  # contracts over w's Y-sharded dim


def test_nested_call_names_the_users_line_and_axis_y():
    m = _compiled(_second_on_y, P("X", None), P(None, "Y"), shapes=[(64, 128), (128, 32)])
    row = _only(collectives(m, mesh=MESH), "all-reduce")
    assert row[schema.MESH_AXES] == "Y"
    assert row[schema.REASON] == "case 3: partial sums"
    assert row[schema.SOURCE_LINE].endswith(_line(_second_on_y, "h @ w.T"))


def _loss(w, x):
    return jnp.sum(jnp.tanh(x @ w))


def test_data_parallel_weight_gradient_is_a_gradient_reduction_over_x():
    # DP (book §6.1): x[B_X, D], w[D, F] replicated; dL/dw = x^T . g sums over B, sharded on X
    m = _compiled(jax.grad(_loss), P(None, None), P("X", None), shapes=[(128, 32), (64, 128)])
    row = _only(collectives(m, mesh=MESH), "all-reduce")
    assert row[schema.MESH_AXES] == "X"
    assert row[schema.REASON] == "gradient reduction"
    assert row[schema.SOURCE_LINE].endswith(_line(_loss, "x @ w"))
    assert "transpose(" in row[schema.SOURCE_OP]


def test_no_collectives_is_an_empty_table():
    m = _compiled(_partial_sums, P("X", None), P(None, "Y"), shapes=[(64, 128), (128, 32)])
    assert collectives(m, mesh=MESH).empty  # case 1: C[I_X, K_Y], purely local


# --- libtpu-compiled HLO (tests/fixtures/tpu, mesh 2x2 on v5e) -----------------------------

def test_tpu_all_gather_of_an_operand_on_its_contracting_dim_is_case_2():
    # matmul case "allgather": X[B, D_X] . Y[D, F]: AllGather_X of X (book §4.1 case 2)
    m = parse_module((TPU / "matmul_allgather.hlo.txt").read_text())
    row = _only(collectives(m, mesh=parse_mesh("2x2")), "all-gather")
    assert row[schema.MESH_AXES] == "X"
    assert row[schema.REASON] == "case 2: operand gathered"
    assert "lhs operand" in row[schema.WHY]
    # X gathered to bf16[256, 512] on each device
    assert row[schema.DEVICE_BYTES] == 256 * 512 * 2


def test_tpu_gather_of_a_non_contracting_dim_is_case_4():
    # matmul case "same_axis": X[B_X, D] . Y[D, F_X]: one operand gathered (case 4)
    m = parse_module((TPU / "matmul_same_axis.hlo.txt").read_text())
    row = _only(collectives(m, mesh=parse_mesh("2x2")), "all-gather")
    assert row[schema.REASON] == "case 4: same axis on both"
    assert "rhs operand" in row[schema.WHY]


def test_device_groups_without_a_mesh():
    m = parse_module((TPU / "matmul_allgather.hlo.txt").read_text())
    row = _only(collectives(m), "all-gather")
    # mesh['axis_0'=1,'axis_1'=2,'axis_2'=2] {'axis_1'}: row-major ids, axis_1 varying
    assert row[schema.MESH_AXES] == "{0,2} {1,3}"
    assert math.isnan(row[schema.MEASURED_S])


# --- repeated work (issue 28 item 3) -------------------------------------------------------

def test_replicated_activation_repeats_the_matmul_over_the_unsplit_axis():
    from harness.explain.redundant import program_factor, repeated_dots
    from harness.hlo import module_totals

    # x[B, D] replicated, w[D, F_X]: each device computes B x F/4, the same on both Y devices
    B, D, F = 64, 128, 32
    m = _compiled(_partial_sums, P(None, None), P(None, "X"), shapes=[(B, D), (D, F)])
    repeated = repeated_dots(m, MESH)
    assert repeated[schema.REPLICATED_AXES].tolist() == ["Y"]
    assert repeated[schema.REPEAT].tolist() == [2.0]
    # the same factor from FLOPs: the program's per device x 8 devices over the model's 2BDF
    flops, _ = module_totals(m)
    assert program_factor(flops, 8, 2 * B * D * F) == pytest.approx(2.0)


def test_a_layout_split_over_every_axis_repeats_nothing():
    from harness.explain.redundant import repeated_dots

    m = _compiled(_partial_sums, P("X", None), P(None, "Y"), shapes=[(64, 128), (128, 32)])
    assert repeated_dots(m, MESH).empty


def test_a_collective_over_groups_of_one_device_moves_nothing():
    # each device its own group: XLA still runs it (a copy), book §4.2 prices no link time
    text = """HloModule jit_psum, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[64]) -> f32[64] {
  %p = f32[64]{0} parameter(0)
  ROOT %all-reduce = f32[64]{0} all-reduce(%p), replica_groups={{0},{1}}, to_apply=%add
}
"""
    row = _only(collectives(parse_module(text)), "all-reduce")
    assert row[schema.REASON] == "one device" and row[schema.MESH_AXES] == "{0} {1}"


def test_a_source_file_shows_relative_to_the_working_directory_it_is_under(tmp_path,
                                                                        monkeypatch):
    from harness.hlo.source import shown_path

    for folder in ("model", "elsewhere"):
        (tmp_path / folder).mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "model")
    path = str(tmp_path / "link" / "train.py")
    monkeypatch.chdir(tmp_path)
    assert shown_path(path) == "model/train.py"  # the link resolved
    monkeypatch.chdir(tmp_path / "model")
    assert shown_path(path) == "train.py"  # asked again from another folder: from there
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert shown_path(path) == path  # not under it: as printed
