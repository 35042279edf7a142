"""Issue 54 parts 3-4: an MoE's all-to-alls named dispatch and combine, and its routed matmuls
priced at what they compute with the routed FLOPs beside, read from the compiled program (a
user's ``shard_map`` MoE layer: top-k routing, a one-hot capacity dispatch, ``all_to_all``,
per-expert einsums; ``jax.lax.ragged_dot``), not from names. Expected figures are the shapes'
arithmetic (f32: 4 bytes) and, for ``ragged-dot``, XLA's own cost analysis."""
import explain_programs as ep
import jax
import jax.numpy as jnp
import pytest

from harness import schema
from harness.explain import collectives
from harness.explain.routed import FORM, ROUTED_FLOPS, WASTE, routed_matmuls
from harness.hlo import category, parse_module
from harness.hlo.cost import instruction_cost, module_totals

F32 = 4
# ragged_dot's shapes: lhs [m, k] in G groups, rhs [G, k, n]
M, K, N, G = 512, 256, 384, 8


def _module(fn, args):
    return parse_module(fn.lower(*args).compile().as_text())


@pytest.fixture(scope="module")
def moe():
    return _module(*ep.shard_map_moe())


def test_the_users_moe_all_to_alls_are_dispatch_and_combine_over_expert(moe):
    table = collectives(moe, mesh=ep.MOE_MESH)
    a2a = table[table[schema.COLLECTIVE] == "all-to-all"].set_index(schema.REASON)
    assert sorted(a2a.index) == ["expert combine", "expert dispatch"]
    assert set(a2a[schema.MESH_AXES]) == {"expert"}
    # the [E, C, D] buffer of this device's tokens: E·C slots of width D
    slots = ep.MOE_E * ep.MOE_C
    assert set(a2a[schema.DEVICE_BYTES]) == {slots * ep.MOE_D * F32}
    why = a2a.loc["expert dispatch", schema.WHY]
    assert f"= {slots} slots x D = {ep.MOE_D} x 4 bytes" in why
    assert "1/4 of an AllGather" in why and "§5.4" in why
    assert "sends each token's routed copies" in why
    assert "brings the experts' results back" in a2a.loc["expert combine", schema.WHY]
    fix = a2a.loc["expert dispatch", schema.FIX]
    assert "inside one node" in fix and "fewer devices" in fix and "capacity factor" in fix


def test_the_backward_dispatch_carries_the_gradients_to_the_experts():
    table = collectives(_module(*ep.shard_map_moe(grad=True)), mesh=ep.MOE_MESH)
    back = table[table[schema.SOURCE_OP].str.contains("transpose(", regex=False)]
    (row,) = back[back[schema.COLLECTIVE] == "all-to-all"].itertuples()
    assert getattr(row, schema.REASON) == "expert dispatch"
    assert "backward pass" in getattr(row, schema.WHY)


def test_the_expert_matmuls_compute_the_padded_capacity(moe):
    rows = routed_matmuls(moe)
    assert list(rows[FORM]) == ["padded capacity"] * 2            # W_in and W_out
    # computed: E/Z experts x Z·C slots each, 2·D·F a slot; routed: 2·T·k·D·F (book §5.4)
    computed = 2 * ep.MOE_E * ep.MOE_C * ep.MOE_D * ep.MOE_F
    routed = 2 * ep.MOE_T * ep.MOE_K * ep.MOE_D * ep.MOE_F
    assert set(rows[schema.FLOPS]) == {computed}
    assert set(rows[ROUTED_FLOPS]) == {routed}
    assert set(rows[WASTE]) == {1 - 1 / ep.MOE_CAPACITY}           # the capacity's padding


def _ragged_args():
    return (jax.ShapeDtypeStruct((M, K), jnp.float32), jax.ShapeDtypeStruct((G, K, N), jnp.float32),
            jax.ShapeDtypeStruct((G,), jnp.int32))


def _ragged(a, b, g):
    return jax.lax.ragged_dot(a, b, g)


def test_a_ragged_dot_op_costs_what_it_computes():
    # the HLO op as jax lowers it for TPU (before libtpu makes it a kernel)
    text = f"""HloModule jit_ragged, entry_computation_layout={{(f32[{M},{K}]{{1,0}}, f32[{G},{K},{N}]{{2,1,0}}, s32[{G}]{{0}})->f32[{M},{N}]{{1,0}}}}

ENTRY main.1 {{
  a.1 = f32[{M},{K}]{{1,0}} parameter(0)
  b.1 = f32[{G},{K},{N}]{{2,1,0}} parameter(1)
  g.1 = s32[{G}]{{0}} parameter(2)
  ROOT ragged.1 = f32[{M},{N}]{{1,0}} ragged-dot(a.1, b.1, g.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}, lhs_ragged_dims={{0}}, rhs_group_dims={{0}}
}}
"""  # noqa: E501
    module = parse_module(text)
    op = module.instruction("ragged.1")
    cost = instruction_cost(op, module)
    assert cost.flops == 2 * M * K * N                 # every row meets one group's matrix
    assert cost.hbm_bytes == (M * K + G * K * N + M * N) * F32 + G * 4
    assert category(module, op) == "matmul"
    (row,) = routed_matmuls(module).itertuples()
    assert getattr(row, FORM) == "ragged" and getattr(row, WASTE) == 0.0


def test_on_cpu_ragged_dot_runs_dense_over_every_group():
    compiled = jax.jit(_ragged).lower(*_ragged_args()).compile()
    module = parse_module(compiled.as_text())
    (row,) = routed_matmuls(module).itertuples()
    assert getattr(row, FORM) == "dense over every expert"
    assert getattr(row, schema.FLOPS) == 2 * G * M * K * N
    assert getattr(row, ROUTED_FLOPS) == 2 * M * K * N and getattr(row, WASTE) == 1 - 1 / G
    # XLA's count: the dense dot, the mask over [G, m, k] (two compares, an and, a select per
    # element) and the group offsets' cumulative sum (a G-wide window over G): ours differs
    # only in that window's convention
    xla = compiled.cost_analysis()["flops"]
    assert xla == 2 * G * M * K * N + 4 * G * M * K + G * G
    assert module_totals(module)[0] == pytest.approx(xla, rel=1e-6)


@pytest.mark.libtpu
def test_on_tpu_ragged_dot_is_a_kernel_costed_as_xla_costs_it():
    from workloads.tpu import topology_mesh

    mesh, _ = topology_mesh("tpu-v5e", "2x2", ("x", "y"))
    put = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    args = [jax.ShapeDtypeStruct(a.shape, jnp.bfloat16 if a.dtype == jnp.float32 else a.dtype,
                                 sharding=put) for a in _ragged_args()]
    compiled = jax.jit(_ragged).lower(*args).compile()
    module = parse_module(compiled.as_text())
    (row,) = routed_matmuls(module).itertuples()
    assert getattr(row, FORM) == "ragged"
    op = module.instruction(getattr(row, schema.OP))
    assert category(module, op) == "matmul"
    ca = compiled.cost_analysis()
    assert getattr(row, schema.FLOPS) == 2 * M * K * N == ca["flops"]
    # its weight gradient is compiled dense over every group: G x the routed FLOPs
    grad = jax.jit(jax.grad(lambda a, b, g: jnp.sum(_ragged(a, b, g).astype(jnp.float32)),
                            argnums=(0, 1))).lower(*args).compile()
    module = parse_module(grad.as_text())
    rows = routed_matmuls(module).set_index(FORM)
    assert rows.loc["ragged", schema.FLOPS] == 2 * M * K * N            # dx: a kernel
    assert rows.loc["dense over every expert", ROUTED_FLOPS] == 2 * M * K * N   # dW
    assert rows.loc["dense over every expert", WASTE] == pytest.approx(1 - 1 / G, abs=1e-3)
    assert module_totals(module)[0] == pytest.approx(grad.cost_analysis()["flops"], rel=1e-6)


@pytest.mark.parametrize("per_node, level, inside", [
    (2, "crosses 2 nodes", True),             # 4 expert devices over 2 nodes of 2 GPUs
    (4, "within one node: 4 GPUs over NVLink", False),
])
def test_on_gpu_nodes_the_all_to_all_names_its_level_and_ep_inside_a_node(moe, per_node, level,
                                                                           inside):
    from harness.chip.network import with_node_size
    from predictions import network

    system = with_node_size(network.system("dgx-h100-superpod"), per_node)
    table = collectives(moe, mesh=ep.MOE_MESH, system=system)
    a2a = table[table[schema.REASON].str.startswith("expert")]
    assert len(a2a) == 2 and a2a[schema.WHY].str.contains(level).all()
    assert a2a[schema.FIX].str.contains("inside one node").all() == inside
