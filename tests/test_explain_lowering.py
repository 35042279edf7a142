"""Issue 58 part 3: where a program asks for a sum sharded (a matmul's ``out_sharding``, an FSDP
gradient), what each backend compiles, and advice the code already follows never offered.

XLA:CPU lowers it as an all-reduce and a slice (tests/test_explain_patterns.py). XLA:TPU,
checked here ahead of time with libtpu on a v5e 2x4 slice (``jax.experimental.topologies``),
compiles no ``reduce-scatter`` opcode either: it fuses the all-reduce and each device's
``dynamic-slice`` into one ``kind=kCustom`` fusion (``calls=%all-reduce-scatter``, a ring
reduce-scatter), which ``harness explain`` reads as the reduce-scatter it is
(``harness.explain.fused``). Expected bytes are the shapes' arithmetic."""
import re

import explain_programs as ep
import pytest

from harness import schema
from harness.explain import collectives
from harness.hlo import executed, parse_module

F32, BF16 = 4, 2
# FSDP gradient on TPU: L layers of W[D_X, D], x[B_X, D] on a slice of 8
FS_L, FS_D, FS_B = 2, 256, 512


def _entry_opcodes(text: str) -> list[str]:
    """The opcodes the program runs (fusion bodies not entered)."""
    return [i.opcode for i, _ in executed(parse_module(text))]


def _follows_its_own_advice(row) -> str:
    """The fix a row offers that the program already follows ("" for none)."""
    fix, why = row[schema.FIX], row[schema.WHY]
    if (row[schema.COLLECTIVE] == "reduce-scatter" or "asks for the result sharded" in why) \
            and "reduce-scatter" in fix:
        return fix  # it is (or asks for) a reduce-scatter already
    if row[schema.REASON] == "collective matmul ring" and fix:
        return fix  # the ring is the book's fix for an exposed gather
    if row[schema.REASON] == "FSDP weight gather" and "shard the weight" in fix:
        return fix  # it is sharded already
    return ""


@pytest.mark.parametrize("program, mesh", [
    ("out_sharded", {"X": 4, "Y": 2}),       # out_sharding P('X', None): all-reduce + slice
    ("ref_fsdp_step", ep.RS_MESH),           # FSDP gradients constrained sharded
    ("fsdp_tp_grad", ep.FT_MESH),            # gradients reduce-scattered in shard_map
    ("collective_matmul", ep.CM_MESH),       # the book's ring
    ("fsdp_microbatches", ep.GA_MESH),       # ZeRO-3 in a microbatch scan
])
def test_no_fix_is_one_the_cpu_program_already_follows(program, mesh):
    fn, args = getattr(ep, program)()
    table = collectives(parse_module(fn.lower(*args).compile().as_text()), mesh=mesh)
    assert len(table)
    assert [_follows_its_own_advice(r) for _, r in table.iterrows()] == [""] * len(table)


def _out_sharded_on_v5e(shape: str) -> str:
    """ep.out_sharded's program (x[M, K_X] . w[K_X, N], out_sharding P('X', None)) compiled for
    a v5e slice whose mesh is ``shape`` over (X, Y); its HLO text."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from workloads.tpu import topology_mesh

    mesh = topology_mesh("tpu-v5e", shape, ("X", "Y"), "explicit")[0]
    put = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32,  # noqa: E731
                                                   sharding=NamedSharding(mesh, spec))
    out = NamedSharding(mesh, P("X", None))
    f = jax.jit(lambda x, w: jnp.einsum("mk,kn->mn", x, w, out_sharding=out))
    return f.lower(put((ep.MM_M, ep.MM_K), P(None, "X")),
                   put((ep.MM_K, ep.MM_N), P("X", None))).compile().as_text()


@pytest.mark.libtpu
def test_on_tpu_an_out_sharded_matmul_is_one_all_reduce_scatter_fusion():
    text = _out_sharded_on_v5e("4x2")  # X=4, Y=2 as on CPU: the v5e 2x4 slice
    entry = _entry_opcodes(text)
    assert "reduce-scatter" not in entry and "all-reduce" not in entry  # no such opcode
    assert re.search(r"kind=kCustom, calls=%all-reduce-scatter", text)
    assert "SingleInputAllReduceScatterFusion" in text
    (row,) = collectives(parse_module(text), mesh={"X": 4, "Y": 2}).to_dict("records")
    assert row[schema.COLLECTIVE] == "reduce-scatter"
    assert row[schema.REASON] == "case 3: partial sums, scattered"
    assert row[schema.MESH_AXES] == "X"
    assert row[schema.DEVICE_BYTES] == ep.MM_M * ep.MM_N * F32  # C[M, N] summed, f32
    assert "one all-reduce-scatter fusion" in row[schema.WHY]
    assert _follows_its_own_advice(row) == ""


@pytest.mark.libtpu
def test_on_tpu_with_x_of_2_the_matmul_sums_a_block_and_permutes_it():
    # X=2, Y=4: the devices along Y share the matmul, each multiplying the block of M/X rows
    # its partition id picks; the block is all-reduced over X and permuted to its owner
    text = _out_sharded_on_v5e("2x4")
    entry = _entry_opcodes(text)
    assert "reduce-scatter" not in entry and "all-reduce-scatter" not in text
    assert entry.count("all-reduce") == 1 and "collective-permute-start" in entry
    table = collectives(parse_module(text), mesh={"X": 2, "Y": 4}).set_index(schema.COLLECTIVE)
    ar = table.loc["all-reduce"]
    assert ar[schema.REASON] == "case 3: partial sums" and ar[schema.MESH_AXES] == "X"
    # a block of C[M/X, N]: each device holds M/X rows of the result
    assert ar[schema.DEVICE_BYTES] == ep.MM_M // 2 * ep.MM_N * F32
    assert "each device multiplies only the block" in ar[schema.WHY]
    assert "reduce-scatter" not in ar[schema.FIX]
    assert table.loc["collective-permute", schema.REASON] == "reduced block handed on"
    assert table.loc["collective-permute", schema.FIX] == ""


@pytest.mark.libtpu
def test_on_tpu_fsdp_gradients_are_one_all_reduce_scatter_and_gathers_are_seen():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from workloads.tpu import topology_mesh

    mesh = topology_mesh("tpu-v5e", "8", ("X",), "auto")[0]
    W = NamedSharding(mesh, P("X", None))
    ws = [jax.ShapeDtypeStruct((FS_D, FS_D), jnp.float32, sharding=W) for _ in range(FS_L)]
    x = jax.ShapeDtypeStruct((FS_B, FS_D), jnp.float32, sharding=W)

    def loss(ws, x):
        for w in ws:
            x = jnp.tanh(x @ w)
        return jnp.mean(x ** 2)

    def grads(ws, x):  # the gradients asked for sharded as the weights (FSDP)
        return [jax.lax.with_sharding_constraint(g, W) for g in jax.grad(loss)(ws, x)]

    text = jax.jit(grads).lower(ws, x).compile().as_text()
    assert "reduce-scatter" not in _entry_opcodes(text)
    assert re.search(r"kind=kCustom, calls=%all-reduce-scatter", text)
    table = collectives(parse_module(text), mesh={"X": 8})
    (rs,) = table[table[schema.COLLECTIVE] == "reduce-scatter"].to_dict("records")
    assert rs[schema.REASON] == "gradient reduction" and rs[schema.MESH_AXES] == "X"
    assert "ws[0]" in rs[schema.WHY] and "ws[1]" in rs[schema.WHY]
    assert rs[schema.DEVICE_BYTES] == FS_L * FS_D * FS_D * F32  # both gradients whole, f32
    gathers = table[table[schema.COLLECTIVE] == "all-gather"]
    # one plain all-gather and one started in an async collective chain (a fusion)
    assert len(gathers) == FS_L and set(gathers[schema.REASON]) == {"FSDP weight gather"}
    assert set(gathers[schema.MESH_AXES]) == {"X"}
    assert sorted(w.split()[2] for w in gathers[schema.WHY]) == ["ws[0]", "ws[1]"]
    # XLA:TPU gathers the weight in bf16 for its default-precision matmul
    assert set(gathers[schema.DEVICE_BYTES]) == {FS_D * FS_D * BF16}
    assert (gathers[schema.SOURCE_LINE] != "").all()
    assert [_follows_its_own_advice(r) for _, r in table.iterrows()] == [""] * len(table)


def test_on_tpu_a_flat_psum_scatter_stays_an_all_reduce_and_a_slice():
    # libtpu's compile of a shard_map psum_scatter of f32[262144] over 8 (tests/fixtures/tpu):
    # the pair is left apart; explain reads the all-reduce as the reduce-scatter asked for
    from test_hlo_tpu import load

    module, _ = load("collective_reduce_scatter")
    (row,) = collectives(module, mesh={"X": 8}).to_dict("records")
    assert row[schema.COLLECTIVE] == "all-reduce"
    assert "XLA:CPU lowers that as this all-reduce and a slice" in row[schema.WHY]
    assert row[schema.DEVICE_BYTES] == 262144 * F32
    assert "reduce-scatter" not in row[schema.FIX]
