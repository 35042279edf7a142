"""Issue 52 part 3: a collective priced at the network level it crosses wherever one is priced
(per op through ``hlo_costs``, ``harness predict collective``, ``harness explain``, ``harness
plan``), the topology declared by ``--system``/``--sharp``/``--nodes``/``--gpus-per-node``/
``--slices``; part 4: a CPU run of 8 devices declared as two 4-GPU H100 nodes priced at its
levels, and the replica groups of a real multi-device trace (a v6e jit__psum) priced over DCN.

Every expected number is the book's arithmetic (gpus.md "Cross-node collectives", training.md
"Scaling Across Pods") as docs/networks.md writes it: per level V G (D - 1)/(D W), an
AllReduce twice the largest (GPU) or twice the sum (TPU slices over DCN)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import schema
from harness.chip.network import Declared, describe, resolve
from harness.cli import main
from harness.errors import HarnessError
from harness.plan import rank
from harness.plan.layouts import Candidate
from harness.plan.request import job_topology
from predictions import collectives, hardware, network, roofline
from predictions.costs import Cost

H100 = hardware.chip_entry("h100")
V5P = hardware.chip_entry("tpu-v5p")
NVLINK, NODE_EGRESS = 450e9, 400e9  # gpus.md: H100 NVLink egress per GPU, IB per 8-GPU node


# --- the declared topology --------------------------------------------------------------------

def test_two_nodes_of_four_gpus_resize_the_superpod():
    s = resolve(Declared(nodes=2, gpus_per_node=4), "h100", 8)
    assert s.name == "dgx-h100-superpod" and s.chip.name == "h100"
    # a leaf stays 32 nodes and a spine 4 SUs: every span scales with the node
    assert [lv.span for lv in s.levels] == [4, 32 * 4, 4 * 32 * 4, 0]
    assert [lv.bytes_per_s for lv in s.levels[:2]] == [NVLINK, NODE_EGRESS]
    # --nodes alone: the program's devices over the nodes
    assert resolve(Declared(nodes=2), "h100", 8).domain == 4
    assert resolve(Declared(nodes=32), "h100", 256).domain == 8
    assert resolve(Declared(nodes=32, sharp="theory"), "h100", 256).sharp.speedup == 2


def test_slices_are_tpu_slices_over_dcn():
    s = resolve(Declared(slices=2), "tpu-v5p", 128)
    # tpus.md: DCN 6.25e9 B/s per v5p chip, a slice of 64 egresses 64 x that = 400 GB/s
    assert [(lv.name, lv.span) for lv in s.levels] == [("ici", 64), ("dcn", 0)]
    assert s.levels[1].bytes_per_s == 64 * 6.25e9
    assert "dcn" in describe(s) and resolve(Declared(), "h100", 8) is None


@pytest.mark.parametrize("decl, chip, devices, says", [
    (Declared(slices=2), "h100", 16, "--slices is for TPU slices"),
    (Declared(nodes=2), "tpu-v5p", 8, "--nodes: GPU networks only"),
    (Declared(system="dgx-h999"), "h100", 8, "known: dgx-h100-superpod"),
    (Declared(nodes=3), "h100", 8, "--nodes 3 does not divide the program's 8"),
    (Declared(nodes=2, gpus_per_node=8), "h100", 8, "= 16 GPUs; the program runs on 8"),
    (Declared(nodes=2), "cpu", 8, "give --system (dgx-h100-superpod"),
    (Declared(slices=3), "tpu-v5p", 8, "--slices 3 does not divide"),
    (Declared(nodes=2), None, 8, "give --chip"),
])
def test_a_bad_declaration_is_one_line(decl, chip, devices, says):
    with pytest.raises(HarnessError) as e:
        resolve(decl, chip, devices)
    assert says in str(e.value) and "\n" not in str(e.value)


# --- per op: Cost.groups -> roofline.comm_time(system=) ----------------------------------------

def test_comm_time_prices_the_groups_at_their_levels_only_when_a_system_is_given():
    V = 64e6
    cost = Cost(comm_bytes=V, collective="all-gather", group_axes=(2,),
                groups=((0, 4), (1, 5), (2, 6), (3, 7)))
    # without a system: as before, one group of 2 inside a node (gpus.md ring: V (n-1)/(n W))
    assert roofline.comm_time(cost, H100) == collectives.all_gather(V, 2, H100)
    s = resolve(Declared(nodes=2, gpus_per_node=4), "h100", 8)
    # two nodes of 4: each group has one GPU per node, 4 groups share a node's 400 GB/s
    assert roofline.comm_time(cost, H100, s) == pytest.approx(V * 4 * (2 - 1) / (2 * NODE_EGRESS))


# --- part 4: a CPU run of 8 devices declared as two 4-GPU nodes -------------------------------

N = 4096 * 256 * 4  # V: f32[4096,256] a device, 4 MiB


@pytest.fixture(scope="module")
def two_node_trace(tmp_path_factory):
    """A jitted program on 8 CPU devices, mesh (node=2, gpu=4): a psum over all 8 devices and
    one over the node axis alone ({0,4} {1,5} {2,6} {3,7}), traced for 3 steps."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2, 4), ("node", "gpu"))

    def body(a):
        return jax.lax.psum(a, ("node", "gpu")), jax.lax.psum(a * 2, "node")

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("node", "gpu")),
                              out_specs=(P(), P("gpu"))))
    x = jax.device_put(jnp.ones((8 * 4096, 256)), NamedSharding(mesh, P(("node", "gpu"))))
    jax.block_until_ready(f(x))
    out = tmp_path_factory.mktemp("two-nodes") / "trace"
    jax.profiler.start_trace(str(out))
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("step", step_num=i):
            jax.block_until_ready(f(x))
    jax.profiler.stop_trace()
    return out


def _by_group(table):
    """The all-reduce rows by group size: 8 (all devices) and 2 (the node axis)."""
    rows = table[table[schema.COLLECTIVE] == "all-reduce"]
    return {("all" if "{" not in r[schema.MESH_AXES] and "node" in r[schema.MESH_AXES]
             and "gpu" in r[schema.MESH_AXES] else r[schema.MESH_AXES]): r
            for _, r in rows.iterrows()}


def test_a_cpu_run_declared_as_two_nodes_is_priced_at_its_levels(two_node_trace):
    from harness.runs.explained import explain_path

    e = explain_path(two_node_trace, "h100", mesh={"node": 2, "gpu": 4},
                     network=Declared(nodes=2, gpus_per_node=4))
    rows = _by_group(e.table)
    everyone, outer = rows["all"], rows["node"]
    # all 8: 4 members in each node over NVLink, V (4-1)/(4 W_gpu); 2 nodes over IB,
    # V (2-1)/(2 W_node); the ring AllReduce twice the larger (gpus.md): NVLink binds (Quiz 4 Q5)
    nvlink, egress = N * 3 / (4 * NVLINK), N * 1 / (2 * NODE_EGRESS)
    assert nvlink > egress
    assert everyone[schema.PREDICTED_S] == pytest.approx(2 * nvlink)
    assert "within one node: 4 GPUs over NVLink, 450 GB/s per GPU" in everyone[schema.WHY]
    # the node axis: one GPU of each group per node, 4 groups share the node's egress: the
    # node-egress term, 2 V 4 (2-1)/(2 W_node) = V/100e9
    assert outer[schema.PREDICTED_S] == pytest.approx(2 * N * 4 * 1 / (2 * NODE_EGRESS))
    assert "crosses 2 nodes: leaf, 400 GB/s per node shared by 4 groups" in outer[schema.WHY]


def test_explain_names_the_level_from_the_command_line(two_node_trace, capsys):
    assert main(["explain", str(two_node_trace), "--chip", "h100", "--nodes", "2",
                 "--gpus-per-node", "4", "--mesh", "node=2,gpu=4"]) == 0
    assert "crosses 2 nodes: leaf, 400 GB/s per node shared by 4 groups" in \
        capsys.readouterr().out
    assert main(["explain", str(two_node_trace), "--chip", "h100", "--slices", "2"]) == 2
    assert "--slices is for TPU slices" in capsys.readouterr().err


# --- part 4: the replica groups of a real multi-device trace ----------------------------------

TRACE = Path(__file__).parent / "fixtures/external/tpu-v6e-inference/tpu_inference_2.xplane.pb"


def test_a_real_traces_groups_are_priced_over_dcn_through_hlo_costs():
    from harness.hlo import hlo_costs, parse_module
    from harness.trace.hlo_proto import embedded_modules, module_text
    from harness.trace.opener import read_xspace

    space, _ = read_xspace(TRACE)
    raw = [b for (name, _), b in embedded_modules(space).items() if name == "jit__psum"][0]
    module = parse_module(module_text(raw))
    V = 5 * 1024 * 1024 * 256 * 4  # f32[5,1024,1024,256]

    def comm(system):
        ops = hlo_costs(module, "tpu-v6e", system=system)
        row = ops[ops[schema.OPCODE] == "all-reduce"].iloc[0]
        return row[schema.T_COMM_S] / row[schema.COUNT]

    # no system: as before, a chain of 2 chips on ICI (sharding.md), 59.7 ms
    assert comm(None) == pytest.approx(2 * V * (1 / 2) / 9e10)
    # as two 4-chip slices: groups {0,4} {1,5} ... each cross DCN, 4 sharing a slice's
    # 4 x 1.25e10 B/s: AllReduce over DCN = 2 V 4 (2-1)/(2 x 4 x 1.25e10) (training.md)
    assert comm(network.tpu_slices("tpu-v6e", 4, 2)) == pytest.approx(
        2 * V * 4 * 1 / (2 * 4 * 1.25e10))


# --- harness predict collective --system ------------------------------------------------------

def test_predict_collective_on_a_system_is_pop_quiz_3(capsys):
    # gpus.md Pop Quiz 3: AllGather_X(bf16[D_X, F_Y]), D = 8192, F = 32768, mesh X=32, Y=8 on
    # one SU: V = 2DF/Y, leaf D = 32 nodes, G = 8 groups a node: V 8 31/(32 400e9) = 1.30 ms
    V = 2 * 8192 * 32768 / 8
    assert main(["predict", "collective", "all-gather", "--bytes", str(V), "--mesh",
                 "X=32,Y=8", "--over", "X", "--chip", "h100", "--system", "dgx-h100-superpod",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seconds"] == pytest.approx(V * 8 * 31 / (32 * NODE_EGRESS))
    assert out["seconds"] == pytest.approx(1.30e-3, rel=0.01)
    assert out["binding"] == "leaf"
    assert out["level"] == "crosses 32 nodes: leaf, 400 GB/s per node shared by 8 groups"


@pytest.mark.parametrize("argv, says", [
    (["--over", "Z"], "no axis Z in --mesh X=32,Y=8; valid: X, Y"),
    (["--slices", "2"], "--slices is for TPU slices"),
    (["--system", "dgx-h999"], "known: dgx-h100-superpod"),
])
def test_predict_collective_bad_network_input_is_one_line(argv, says, capsys):
    assert main(["predict", "collective", "all-gather", "--bytes", "1e6", "--mesh", "X=32,Y=8",
                 "--chip", "h100", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[-1], err


# --- harness plan: the job's topology and the level each mesh axis binds at -------------------

def test_plan_job_topology_of_nodes_and_slices():
    topo, s = job_topology(H100, (8,), False, Declared(nodes=32))
    assert topo == (256,) and s.domain == 8 and s.name == "dgx-h100-superpod"
    with pytest.raises(HarnessError, match="--nodes 32 x 8 GPUs per node = 256"):
        job_topology(H100, (128,), True, Declared(nodes=32))
    topo, s = job_topology(V5P, (4, 4, 4), True, Declared(slices=2))
    assert topo == (2, 4, 4, 4) and [lv.span for lv in s.levels] == [64, 0]
    assert job_topology(V5P, (4, 4, 4), True, Declared()) == ((4, 4, 4), None)


def test_plan_names_the_level_each_mesh_axis_binds_at():
    h100 = resolve(Declared(nodes=32), "h100", 256)
    # FSDP over all 256: NVLink V 7/(8 W_gpu) < leaf V 31/(32 W_node): the leaf binds
    assert 7 / (8 * NVLINK) < 31 / (32 * NODE_EGRESS)
    assert rank.axis_levels(h100, Candidate("fsdp", 256, 1, 1, 1)) == \
        "X: crosses 32 nodes: leaf, 400 GB/s per node"
    # FSDP + TP with TP inside each node: X's 8 groups share each node's egress (Pop Quiz 3)
    assert rank.axis_levels(h100, Candidate("fsdp_tp", 32, 8, 1, 1)) == \
        ("X: crosses 32 nodes: leaf, 400 GB/s per node shared by 8 groups; "
         "Y: within one node: 8 GPUs over NVLink, 450 GB/s per GPU")
    v5p = resolve(Declared(slices=2), "tpu-v5p", 128)
    assert rank.axis_levels(v5p, Candidate("dp_tp", 2, 64, 1, 3)).startswith(
        "X: crosses 2 slices: dcn, 400 GB/s per slice shared by 64 groups; Y: within one "
        "slice: 64 chips over ICI")
    assert rank.axis_levels(None, Candidate("dp", 8, 1, 1, 1)) is None


@pytest.mark.slow
def test_plan_ranks_layouts_of_a_two_slice_v5p_job(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_HARNESS_CACHE", str(tmp_path))
    assert main(["plan", "--chip", "tpu-v5p", "--topology", "2x2x1", "--slices", "2",
                 "--layout", "fsdp_tp", "--batch", "64seq", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("2 slices: compiled on XLA:CPU over all 8 chips" in n for n in out["notes"])
    row = out["layouts"][0]
    assert row[schema.PREDICTED_STEP_S] > 0 and "slice" in row[schema.LEVELS]
