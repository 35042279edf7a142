"""Issue 58: XLA:TPU's all-reduce-scatter fusion is priced as the reduce-scatter it runs.

Where a program asks for a sum sharded, libtpu emits no ``reduce-scatter`` opcode: a
``kind=kCustom`` fusion whose body all-reduces and keeps each device's ``dynamic-slice`` of
the sum at an offset from ``partition-id`` (``harness.hlo.tpu.all_reduce_scatter``). Its ring
moves a reduce-scatter's bytes, half an all-reduce's (book §4.2: AllReduce = ReduceScatter +
AllGather). Expected times are the book's formulas worked here from the chip's figures
(``predictions.hardware``): on v5e an axis under 16 has no wraparound, a one-way chain of n
devices, T = max((n-1)·T_min, V·(n-1)/(n·W1)) for a reduce-scatter, twice both for an
all-reduce (``predictions.collectives``). The fixture is libtpu 0.0.42.1's compile of
x[64, 128_X] · w[128_X, 32] with ``out_sharding`` P('X', None) on a v5e 2x4 slice, mesh X=4,
Y=2 (tests/test_explain_lowering.py compiles the same program)."""
import gzip

import pytest
from conftest import FIXTURES

from harness import schema
from harness.explain import fused
from harness.hlo import parse_module, tpu
from harness.hlo.cost import hlo_costs
from harness.hlo.tpu import all_reduce_scatter
from predictions import hardware
from predictions.rules import Shape

F32, BF16 = 4, 2
TPU = FIXTURES.parent / "tpu"
V5E = hardware.chip_entry("tpu-v5e")
TEXT = (FIXTURES / "tpu_all_reduce_scatter.txt").read_text()


def _chain(V: float, n: int, times: int = 1) -> float:
    """The book's ring on a v5e axis without wraparound (sharding.md, tpus.md); ``times`` = 2
    for an all-reduce (a reduce-scatter then an all-gather)."""
    W1, T_min = V5E.ici_bytes_per_s, V5E.hop_latency_s
    return times * max((n - 1) * T_min, V * (n - 1) / (n * W1))


def _row(text: str, op: str = "fusion"):
    df = hlo_costs(parse_module(text), V5E)
    return df.set_index(schema.OP).loc[op]


def test_the_fixtures_fusion_is_a_reduce_scatter_of_the_all_reduces_operand():
    module = parse_module(TEXT)
    f = module.entry.by_name["fusion"]
    # C[64, 32] f32 summed over X (groups of 4), each device keeps 64/4 rows
    assert all_reduce_scatter(module, f) == (Shape("f32", (16, 32)),)
    row = _row(TEXT)
    assert row[schema.CATEGORY] == schema.CATEGORIES[2] == "collective"
    assert (row[schema.COLLECTIVE], row[schema.GROUP_SIZE]) == ("reduce-scatter", 4)
    V = 64 * 32 * F32  # the unreduced sum each device holds: the book's V for a reduce-scatter
    assert row[schema.COMM_BYTES] == V
    assert row[schema.T_COMM_S] == pytest.approx(_chain(V, 4))
    assert row[schema.T_COMM_S] == pytest.approx(_chain(V, 4, times=2) / 2)
    # the fusion reads the sum and writes its slice to HBM
    assert row[schema.HBM_BYTES] == V + 16 * 32 * F32
    # explain reads the same fusion the same way (one recognition, harness.hlo.tpu)
    assert fused.fused(f, module)[0] == "reduce-scatter"


@pytest.mark.parametrize("edit, why", [
    # the slice's offset no longer depends on the device: every device keeps the same rows
    (("%partition-id.2 = u32[] partition-id()", "%partition-id.2 = u32[] constant(1)"),
     "a fixed offset"),
    # the fusion returns the whole sum: nothing is scattered
    (("ROOT %dynamic-slice.5 = f32[16,32]", "%dynamic-slice.5 = f32[16,32]"),
     "no slice kept"),
])
def test_an_all_reduce_not_sliced_by_partition_stays_an_all_reduce(edit, why):
    text = TEXT.replace(*edit)
    if why == "no slice kept":  # the body's root is the all-reduce, returned whole
        text = text.replace("%all-reduce.1 = f32[64,32]", "ROOT %all-reduce.1 = f32[64,32]")
        text = text.replace("-> f32[16,32] {\n  %input", "-> f32[64,32] {\n  %input")
        text = text.replace("ROOT %fusion = f32[16,32]", "ROOT %fusion = f32[64,32]")
    assert text != TEXT
    module = parse_module(text)
    assert all_reduce_scatter(module, module.entry.by_name["fusion"]) is None
    row = _row(text)
    V = 64 * 32 * F32
    assert row[schema.COLLECTIVE] == "all-reduce"
    assert row[schema.T_COMM_S] == pytest.approx(_chain(V, 4, times=2))


def test_fsdp_gradients_summed_in_one_tuple_all_reduce_are_one_reduce_scatter():
    # tests/fixtures/tpu/llama_train (tiny, v5e 2x2, FSDP over 2): three bf16[64, 64] weight
    # gradients all-reduced as one tuple, each sliced to its half by partition id
    text = gzip.decompress((TPU / "llama_train.hlo.txt.gz").read_bytes()).decode()
    module = parse_module(text)
    f = module.instruction("fusion.525")
    assert f.called("calls") == ("all-reduce-scatter.4.clone.1",)
    assert all_reduce_scatter(module, f) == (Shape("bf16", (64, 32)), Shape("bf16", (32, 64)),
                                             Shape("bf16", (32, 64)))
    row = _row(text, "fusion.525")
    V = 3 * 64 * 64 * BF16
    assert (row[schema.COLLECTIVE], row[schema.GROUP_SIZE]) == ("reduce-scatter", 2)
    assert row[schema.COMM_BYTES] == V
    # inside the backward scan over the layers, 2 trips (t_* are per step, x count)
    assert row[schema.COUNT] == 2
    assert row[schema.T_COMM_S] == pytest.approx(2 * _chain(V, 2))


def test_a_fusion_without_a_collective_is_not_one():
    module = parse_module(TEXT)
    matmul = module.entry.by_name["fusion.1"]
    assert tpu.collective(module, matmul) is None and all_reduce_scatter(module, matmul) is None


M, K, N = 2048, 1024, 1024  # C[M, N] f32: 8 MiB summed over 8 devices, bandwidth-bound


def _v5e_matmul(out_spec) -> str:
    """x[M, K_x] @ w[K_x, N] compiled by libtpu for a v5e 2x4 slice, mesh x=8, its output
    sharded by ``out_spec``; the HLO text."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from workloads.tpu import topology_mesh

    mesh = topology_mesh("tpu-v5e", "8", ("x",), "auto")[0]
    put = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32,  # noqa: E731
                                                   sharding=NamedSharding(mesh, spec))
    f = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, out_spec))
    return f.lower(put((M, K), P(None, "x")), put((K, N), P("x", None))).compile().as_text()


def _collective_row(text: str):
    df = hlo_costs(parse_module(text), V5E)
    (i,) = df.index[df[schema.CATEGORY] == "collective"]
    return df.loc[i]


@pytest.mark.libtpu
def test_on_v5e_a_sum_sharded_costs_half_the_all_reduce():
    from jax.sharding import PartitionSpec as P

    text = _v5e_matmul(P("x"))
    assert "calls=%all-reduce-scatter" in text
    row = _collective_row(text)
    V = M * N * F32
    assert (row[schema.CATEGORY], row[schema.COLLECTIVE]) == ("collective", "reduce-scatter")
    assert (row[schema.GROUP_SIZE], row[schema.COMM_BYTES]) == (8, V)
    assert row[schema.T_COMM_S] == pytest.approx(_chain(V, 8))  # 7/8 · 8 MiB / 45 GB/s
    assert row[schema.T_COMM_S] == pytest.approx(_chain(V, 8, times=2) / 2)
    assert row[schema.BOUND] == "comm" and row[schema.PREDICTED_S] == row[schema.T_COMM_S]

    # the same sum kept whole on every device: a plain all-reduce, 2V/W
    whole = _collective_row(_v5e_matmul(P()))
    assert (whole[schema.COLLECTIVE], whole[schema.COMM_BYTES]) == ("all-reduce", V)
    assert whole[schema.T_COMM_S] == pytest.approx(_chain(V, 8, times=2))
