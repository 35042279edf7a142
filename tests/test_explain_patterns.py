"""Issue 58: explanations that hold on programs written in the public patterns (the book's JAX
chapter, JAX's documentation), not the harness's own workloads: the book's unrolled collective
matmul, one function on two meshes, a ``shard_map`` FSDP + TP gradient, an FSDP step whose
state is ``jax.Ref``s, a gathered bias. The programs are ``tests/explain_programs.py``; every
expected byte count is the shapes' arithmetic (f32: 4 bytes)."""
import explain_programs as ep
import pandas as pd
import pytest

from harness import schema
from harness.explain import collectives, for_run
from harness.explain.meshes import program_meshes
from harness.hlo import parse_module

F32 = 4


def _module(fn, args):
    return parse_module(fn.lower(*args).compile().as_text())


def _rows(table, kind: str):
    return table[table[schema.COLLECTIVE] == kind]


@pytest.mark.parametrize("unroll", [True, False])
def test_the_books_collective_matmul_is_a_ring_over_y_unrolled_or_looped(unroll):
    # A[B_X, D_Y] shifted around the Y ring, each chunk multiplied by W[D, F_Y]'s rows
    # (book §4.1, `jax-stuff.md`): no resharding, and no fix (the code is the book's fix)
    table = collectives(_module(*ep.collective_matmul(unroll)), mesh=ep.CM_MESH)
    assert len(table) == (ep.CM_MESH["Y"] - 1 if unroll else 1)  # fori_loop(0, Y - 1) unrolled
    assert set(table[schema.COLLECTIVE]) == {"collective-permute"}
    assert set(table[schema.REASON]) == {"collective matmul ring"}
    assert set(table[schema.MESH_AXES]) == {"Y"}
    chunk = ep.CM_B // ep.CM_MESH["X"] * (ep.CM_D // ep.CM_MESH["Y"]) * F32
    assert set(table[schema.DEVICE_BYTES]) == {chunk}
    assert (table[schema.FIX] == "").all()
    if unroll:
        assert table[schema.WHY].str.contains("AllGather form").all()


def test_one_function_on_two_meshes_names_each_compilations_axis():
    # matmul x[M_X, K_Y] . w[K_Y, N] compiled on X=4,Y=2 and then on X=2,Y=2: each
    # compilation's partial sums are all-reduced over Y (case 3) on its own mesh
    first, second = _module(*ep.matmul_on((4, 2))), _module(*ep.matmul_on((2, 2)))
    name = first.name
    assert second.name == name
    modules = {(name, "1"): first, (name, "2"): second}
    meshes = [{"axes": {"X": 4, "Y": 2}, "devices": list(range(8))},
              {"axes": {"X": 2, "Y": 2}, "devices": list(range(4))}]
    chosen, notes = program_meshes(modules, {schema.MESHES: meshes})
    assert chosen == {(name, "1"): {"X": 4, "Y": 2}, (name, "2"): {"X": 2, "Y": 2}}
    assert notes == []
    ops = pd.DataFrame({schema.PROGRAM: [name, name], schema.PROGRAM_ID: ["1", "2"],
                        schema.OP: ["x", "x"]})
    table = for_run(modules, ops, None, None, program_meshes=chosen)
    assert list(table[schema.MESH_AXES]) == ["Y", "Y"]
    assert set(table[schema.REASON]) == {"case 3: partial sums"}
    by_id = table.set_index(schema.PROGRAM_ID)[schema.DEVICE_BYTES]
    assert by_id["1"] == ep.MM_M // 4 * ep.MM_N * F32  # C[M/X, N] on X=4
    assert by_id["2"] == ep.MM_M // 2 * ep.MM_N * F32  # on X=2


def test_shard_map_fsdp_tp_gradient_reads_as_the_books_scheme():
    # book §6.1 FSDP + TP: W_in[D_X, F_Y], W_out[F_Y, D_X] gathered over X, their gradients
    # reduce-scattered over X, the activations' partial sums all-reduced over Y
    table = collectives(_module(*ep.fsdp_tp_grad()), mesh=ep.FT_MESH)
    x, y = ep.FT_MESH["X"], ep.FT_MESH["Y"]
    gathers = _rows(table, "all-gather")
    assert set(gathers[schema.REASON]) == {"FSDP weight gather"}
    assert set(gathers[schema.MESH_AXES]) == {"X"}
    assert set(gathers[schema.DEVICE_BYTES]) == {ep.FT_D * ep.FT_F // y * F32}
    assert gathers[schema.WHY].str.contains("params['w_in']", regex=False).sum() == 1
    assert not gathers[schema.WHY].str.contains("\\", regex=False).any()  # names unescaped
    grads = _rows(table, "reduce-scatter")
    assert set(grads[schema.REASON]) == {"gradient reduction"}
    assert set(grads[schema.MESH_AXES]) == {"X"}
    assert {w.split(":")[0] for w in grads[schema.WHY]} == {
        "the weight gradients of params['w_in']", "the weight gradients of params['w_out']"}
    # already reduce-scattered: no advice to reduce-scatter them
    assert not grads[schema.FIX].str.contains("reduce-scatter").any()
    (tp,) = _rows(table, "all-reduce").itertuples()
    assert getattr(tp, schema.MESH_AXES) == "Y"
    assert getattr(tp, schema.REASON) == "case 3: partial sums"
    assert getattr(tp, schema.DEVICE_BYTES) == ep.FT_B // x * ep.FT_D * F32


def test_ref_state_fsdp_step_names_the_users_paths_and_says_how_cpu_lowered_it():
    from harness.capture.arguments import argument_paths, parameter_names

    fn, args = ep.ref_fsdp_step()
    lowered = fn.lower(*args)
    names = argument_paths(lowered, parameter_names(fn))
    params = [f"state['params'][{k}]" for k in range(ep.RS_L)]
    assert names == [f"state['momentum'][{k}]" for k in range(ep.RS_L)] + params + ["x"]
    table = collectives(parse_module(lowered.compile().as_text()), mesh=ep.RS_MESH,
                        names=names)
    assert set(table[schema.MESH_AXES]) == {"X"}
    gathers = _rows(table, "all-gather")
    assert set(gathers[schema.REASON]) == {"FSDP weight gather"}
    assert set(gathers[schema.DEVICE_BYTES]) == {ep.RS_D * ep.RS_D * F32}
    assert sorted(w.split()[2] for w in gathers[schema.WHY]) == params
    (grads,) = _rows(table, "all-reduce").itertuples()
    assert getattr(grads, schema.REASON) == "gradient reduction"
    why = getattr(grads, schema.WHY)
    assert all(p in why for p in params) and "Arg_" not in why and "momentum" not in why
    # every weight's gradient whole, and the loss: L x D x D + 1 f32
    assert getattr(grads, schema.DEVICE_BYTES) == (ep.RS_L * ep.RS_D * ep.RS_D + 1) * F32
    # the step asks for them sharded: XLA:CPU's all-reduce + slice is that reduce-scatter
    assert "XLA:CPU lowers that as this all-reduce and a slice" in why
    assert "reduce-scatter" not in getattr(grads, schema.FIX)


def test_a_gathered_bias_is_explained_by_the_add_it_feeds_not_the_next_matmul():
    table = collectives(_module(*ep.bias_gathered()), mesh={"X": 8})
    (row,) = table.itertuples()
    assert getattr(row, schema.REASON) == "gathered for an elementwise op"
    assert getattr(row, schema.WHY).startswith("b is gathered over X for %")
    assert "(add)" in getattr(row, schema.WHY) and "dot" not in getattr(row, schema.WHY)
    assert getattr(row, schema.DEVICE_BYTES) == ep.BI_F * F32


def test_an_out_sharding_the_backend_lowered_as_all_reduce_and_slice_gets_no_scatter_advice():
    # case 3 with out_sharding P('X', None): the program asks for a reduce-scatter over X;
    # XLA:CPU sums C[M, N] whole and slices it (book §4.4: P('X', ...) yields a ReduceScatter)
    (row,) = collectives(_module(*ep.out_sharded()), mesh={"X": 4, "Y": 2}).itertuples()
    assert getattr(row, schema.COLLECTIVE) == "all-reduce"
    assert getattr(row, schema.REASON) == "case 3: partial sums"
    assert getattr(row, schema.MESH_AXES) == "X"
    assert getattr(row, schema.DEVICE_BYTES) == ep.MM_M * ep.MM_N * F32
    assert "XLA:TPU fuses the pair into one all-reduce-scatter op" in getattr(row, schema.WHY)
    assert "reduce-scatter" not in getattr(row, schema.FIX)
