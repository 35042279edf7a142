"""Issue 53 part 4: ``harness explain`` names a pipeline's stage transfers and the weights an
FSDP loop gathers again for each microbatch, read from what the compiled program shows (a
user's ``shard_map`` pipeline of ``ppermute``s, a user's gradient-accumulation scan), not from
names. Every expected byte count and count is the programs' arithmetic (f32: 4 bytes)."""
import math

import explain_programs as ep
import pandas as pd
import pytest

from harness import schema
from harness.explain import collectives
from harness.explain.axes import shift_axis
from harness.explain.table import exposure
from harness.hlo import parse_module

F32 = 4


def _module(fn, args):
    return parse_module(fn.lower(*args).compile().as_text())


@pytest.fixture(scope="module")
def pipeline_grad():
    return _module(*ep.shard_map_pipeline(grad=True))


def _stage_rows(table):
    return table[table[schema.REASON] == "stage transfer"]


def test_a_users_shard_map_pipeline_hands_each_microbatch_to_the_next_stage():
    table = collectives(_module(*ep.shard_map_pipeline()), mesh=ep.PP_MESH)
    (row,) = _stage_rows(table).itertuples()
    assert getattr(row, schema.COLLECTIVE) == "collective-permute"
    assert getattr(row, schema.MESH_AXES) == "stage"
    # one microbatch's activations on one device: B/M/X sequences x T x D, f32
    b = ep.PP_B // ep.PP_M // ep.PP_MESH["data"]
    assert getattr(row, schema.DEVICE_BYTES) == b * ep.PP_T * ep.PP_D * F32
    # GPipe's forward: M + S - 1 ticks, one hand-off each
    assert getattr(row, schema.COUNT) == ep.PP_M + ep.PP_S - 1
    why = getattr(row, schema.WHY)
    assert f"B/M·T·D = {b}·{ep.PP_T}·{ep.PP_D} x 4 bytes" in why
    assert "2BD/(W·N_MB)" in why and "§6.2" in why and "handed by each stage to the next" in why
    assert getattr(row, schema.FIX) == ""  # the transfer is nearly free: nothing to fix


def test_the_backward_pass_sends_the_gradients_back_along_the_ring(pipeline_grad):
    rows = _stage_rows(collectives(pipeline_grad, mesh=ep.PP_MESH))
    assert len(rows) == 2 and set(rows[schema.MESH_AXES]) == {"stage"}
    back = rows[rows[schema.SOURCE_OP].str.contains("transpose(", regex=False)]
    assert len(back) == 1 and back[schema.WHY].str.contains("sent back to the previous stage"
                                                           ).all()
    assert set(rows[schema.COUNT]) == {ep.PP_M + ep.PP_S - 1}


def test_the_collective_matmul_ring_is_not_a_stage_transfer():
    # its chunk is multiplied on the device that sends it too (book §4.1)
    table = collectives(_module(*ep.collective_matmul(unroll=False)), mesh=ep.CM_MESH)
    assert set(table[schema.REASON]) == {"collective matmul ring"}


@pytest.mark.parametrize("pairs, axis", [
    ([(0, 2), (2, 4), (4, 6), (6, 0), (1, 3), (3, 5), (5, 7), (7, 1)], "stage"),  # ring
    ([(2, 0), (4, 2), (6, 4), (0, 6), (3, 1), (5, 3), (7, 5), (1, 7)], "stage"),  # reversed
    ([(0, 2), (2, 4), (4, 6), (1, 3), (3, 5), (5, 7)], "stage"),                  # a chain
    ([(0, 6), (1, 7)], ""),                          # first stage to last only: no pipeline
    ([(0, 1), (2, 3), (4, 5), (6, 7)], "data"),      # a chain of 2 along data
    ([(0, 3), (3, 0)], ""),                          # moves along both axes
    ([(0, 4), (4, 0), (2, 6), (6, 2)], ""),          # by two stages
])
def test_shift_axis(pairs, axis):
    # partition i sits at (stage, data) = (i // 2, i % 2)
    assert shift_axis(pairs, {"stage": 4, "data": 2}) == axis


def test_fsdp_inside_a_microbatch_scan_gathers_each_weight_again_per_microbatch():
    table = collectives(_module(*ep.fsdp_microbatches()), mesh=ep.GA_MESH)
    (row,) = table[table[schema.COLLECTIVE] == "all-gather"].itertuples()
    assert getattr(row, schema.REASON) == "weight gathered per microbatch"
    # one layer's W[D, D] gathered whole, for each of L layers in each of M microbatches
    assert getattr(row, schema.DEVICE_BYTES) == ep.GA_D * ep.GA_D * F32
    assert getattr(row, schema.COUNT) == ep.GA_L * ep.GA_M
    why = getattr(row, schema.WHY)
    assert why.startswith("ws is gathered over X for %") and f" {ep.GA_M} times a step" in why
    assert "ZeRO-3" in why and "§6.2" in why
    assert getattr(row, schema.FIX).startswith("ZeRO-1: shard the optimizer state only")


def test_a_stage_transfer_says_whether_the_step_waited_for_it():
    assert exposure(0.0, 2e-3) == "; hidden under compute: the step waited none of its 2 ms"
    assert exposure(1.5e-3, 2e-3) == "; exposed: the step waited 1.5 ms of its 2 ms"
    assert exposure(math.nan, 2e-3) == ""
    module = _module(*ep.shard_map_pipeline())
    op = _stage_rows(collectives(module, mesh=ep.PP_MESH))[schema.OP].iloc[0]
    step = {schema.STEP_COLLECTIVES: [{schema.OP: op, schema.EXPOSED_COMM_S: 3e-4,
                                       schema.COMM_S: 1e-3}]}
    ops = pd.DataFrame({schema.PROGRAM: [module.name], schema.OP: [op],
                        schema.MEASURED_S: [1e-3], schema.PREDICTED_S: [1e-5]})
    (row,) = _stage_rows(collectives(module, mesh=ep.PP_MESH, ops=ops, step=step)).itertuples()
    assert getattr(row, schema.WHY).endswith("; exposed: the step waited 300 us of its 1 ms")
    assert getattr(row, schema.EXPOSED_COMM_S) == 3e-4


@pytest.mark.heavy
def test_our_pipelined_llama_names_its_stage_transfers():
    # the tiny_pp preset (4 stages x 2 on the 4x2 mesh, 8 microbatches of 2 sequences, GPipe):
    # forward and backward hand-offs over the first axis, M + S - 1 = 11 ticks each; one
    # microbatch on one replica: 2/2 = 1 sequence x T=16 x D=64, f32
    from workloads.llama import train
    from workloads.mesh import make_mesh

    cfg = train.PRESETS["tiny_pp"]
    fn, args = train.build(cfg, make_mesh("4x2"))
    rows = _stage_rows(collectives(_module(fn, args), mesh={"X": 4, "Y": 2}))
    assert len(rows) == 2 and set(rows[schema.MESH_AXES]) == {"X"}
    assert set(rows[schema.COUNT]) == {cfg.microbatches + cfg.stages - 1}
    assert set(rows[schema.DEVICE_BYTES]) == {cfg.B // cfg.microbatches // 2 * cfg.T * cfg.D * F32}
