"""Replica groups kept in a trace's HloProto (``collective_device_list``, iota or explicit) and
the partition count: the real v6e ``jit__psum`` reads as 4 groups of 2 (xprof prints
``replica_groups=[4,2]<=[2,4]T(1,0)``), and its groups map onto network levels."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.hlo import parse_module
from harness.hlo.attrs import explicit_text, iota_text, replica_groups
from harness.hlo.desc import _group_axes
from harness.trace.hlo_proto import embedded_modules, module_text
from harness.trace.opener import read_xspace
from predictions import collectives, levels, network

TRACE = Path(__file__).parent / "fixtures/external/tpu-v6e-inference/tpu_inference_2.xplane.pb"


@pytest.fixture(scope="module")
def psum():
    space, _ = read_xspace(TRACE)
    raw = [b for (name, _), b in embedded_modules(space).items() if name == "jit__psum"][0]
    return parse_module(module_text(raw))


def _all_reduce(module):
    return [i for c in module.computations.values() for i in c.instructions
            if i.opcode == "all-reduce"][0]


def test_iota_and_explicit_text_round_trip():
    assert iota_text(4, 2, (2, 4), (1, 0)) == "[4,2]<=[2,4]T(1,0)"
    assert iota_text(2, 4, (8,), (0,)) == "[2,4]<=[8]"
    g = replica_groups(iota_text(4, 2, (2, 4), (1, 0)))
    # iota(8) reshaped [2,4] = [[0,1,2,3],[4,5,6,7]], transposed -> rows {0,4} {1,5} {2,6} {3,7}
    assert g.groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert replica_groups(explicit_text(((0, 1), (2, 3)))).groups == ((0, 1), (2, 3))


def test_v6e_psum_reads_as_groups_of_two(psum):
    ar = _all_reduce(psum)
    g = ar.attrs["replica_groups"]
    assert (g.kind, g.group_size, g.num_groups) == ("iota", 2, 4)  # xprof: [4,2]<=[2,4]T(1,0)
    assert g.groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert psum.num_partitions == 8  # from the module's device assignment (computation_count)
    assert _group_axes(ar, psum) == (2,)


def test_v6e_psum_priced_as_an_all_reduce_over_two_chips(psum):
    # f32[5,1024,1024,256] = 5.37e9 B over 2 v6e chips: no wraparound on an axis of 2, a chain
    # at one-way 9e10 B/s: 2 * V * (n - 1)/n / 9e10 (sharding.md) = 59.7 ms (measured: 122 ms)
    V = 5 * 1024 * 1024 * 256 * 4
    t = collectives.all_reduce(V, 2, "tpu-v6e")
    assert t == pytest.approx(2 * V * (1 / 2) / 9e10)
    assert t == pytest.approx(59.7e-3, rel=0.002)


def test_trace_groups_map_to_levels(psum):
    # the groups {0,4} {1,5} ... on 8 v6e chips: in one 8-chip slice they stay on ICI; as two
    # 4-chip slices over DCN each group has one chip per slice and the DCN level is crossed
    groups = _all_reduce(psum).attrs["replica_groups"].groups
    one = levels.crossings(groups, network.tpu_slices("tpu-v6e", 8, 1))
    assert [(lv.name, D, G) for lv, D, G in one] == [("ici", 2, 1)]
    two = levels.crossings(groups, network.tpu_slices("tpu-v6e", 4, 2))
    assert [(lv.name, D, G) for lv, D, G in two] == [("dcn", 2, 4)]
    # each chip reduces its V over DCN with its partner: 2 V (2 - 1)/2 / W_dcn (1.25e10 per chip)
    V = 5 * 1024 * 1024 * 256 * 4
    t = levels.price("all-reduce", V, groups, network.tpu_slices("tpu-v6e", 4, 2))
    assert t.seconds == pytest.approx(2 * V * (1 / 2) * 4 / (4 * 1.25e10))
