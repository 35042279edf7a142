"""``harness plan`` ranks expert layouts (issue 54 part 4): the book's all-to-all and memory
figures written out by hand at two (Z, capacity) points, DeepSeek-V3's rows on H100 nodes and
a v5p slice, bad options in one line; the tiny MoE compiled on CPU behind ``heavy``."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import workloads
from harness.plan import experts, experts_book
from harness.plan.layouts import PLANNABLE
from predictions import hardware, network

H100 = hardware.chip_entry("h100")
C = 989e12                      # H100 bf16 dense FLOP/s (gpus.md)
W_NVLINK, W_NODE = 300e9, 400e9  # h800-cluster: NVLink per GPU, InfiniBand per node (gpus.md)
# the workload's DeepSeek-V3 (every layer MoE, GQA: workloads.llama.moe_presets.NOTES)
L, D, F, N, K, H, V, E, k = 61, 7168, 2048, 128, 8, 128, 129280, 256, 8
B = 15360 * 4096                # gpus.md: DeepSeek-V3's 62,914,560 tokens a step
P_ROUTED = L * E * 3 * D * F    # transformers.md §5.4: E x 3DF a MoE layer
P_REST = (L * (2 * D * (N + K) * H + 3 * D * F + D * E + 2 * D)  # attention, shared, router,
          + 2 * D * V + D)                                        # norms; embeddings, final norm


def _price(mesh, capacity):
    cfg = workloads.make_config("llama_train", "deepseek_v3", {})
    return experts_book.price(experts_book.moe_config(cfg), PLANNABLE["llama_train"](cfg), mesh,
                              B, 4096, H100, (2048,), network.system("h800-cluster"), capacity,
                              1.0)


@pytest.mark.parametrize("mesh, capacity, dispatch_s", [
    # 64 GPUs = 8 whole nodes: the node egress binds, V(M-1)/(M^2 W_node), M = 8 nodes (gpus.md)
    ({"data": 32, "expert": 64}, None, lambda v: v * 7 / (8 * 8 * W_NODE)),
    # 8 GPUs in one node: NVLink, V(Z-1)/(Z^2 W_gpu)
    ({"data": 256, "expert": 8}, 1.25, lambda v: v * 7 / (8 * 8 * W_NVLINK)),
])
def test_all_to_all_and_memory_by_hand(mesh, capacity, dispatch_s):
    Z, X = mesh["expert"], mesh["data"]
    p = _price(mesh, capacity)
    c = capacity or 1.0
    v = c * (B / X) * k * D * 2                  # dispatch: c * tokens * k * D * bf16
    assert p.dispatch_bytes == pytest.approx(v)
    # dispatch + combine, forward and backward, each MoE layer
    assert p.a2a_s == pytest.approx(4 * L * dispatch_s(v), rel=1e-3)
    assert p.expert_math_s == pytest.approx(c * 3 * 2 * B * k * 3 * D * F * L / (2048 * C))
    # Adam's 10 bytes a parameter: the routed experts over Z, the rest whole on each replica
    assert p.memory["weights"] == pytest.approx(10 * (P_ROUTED / Z + P_REST), rel=1e-9)
    assert p.memory["activations"] == pytest.approx(2 * D * B / (X * Z) * L)  # full remat
    assert p.memory["dispatch"] == pytest.approx(2 * v / Z)


def test_capacity_pads_bytes_and_matmuls():
    ragged, padded = (_price({"data": 256, "expert": 8}, c) for c in (None, 2.0))
    assert padded.dispatch_bytes == pytest.approx(2 * ragged.dispatch_bytes)
    assert padded.expert_math_s == pytest.approx(2 * ragged.expert_math_s)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "plan", *args],
                          capture_output=True, text=True, timeout=300)


def _in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``harness plan`` in this process (jax already imported: seconds, not a fresh start)."""
    from harness import cli

    rc = cli.main(["plan", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_deepseek_on_h100_nodes(capsys):
    """256 nodes of 8: the published 16 x 2 x 64 layout is priced and ranked behind the best,
    comm-bound: its all-to-alls cross 8 nodes where F < 8C/W_node keeps EP in 1-2 (gpus.md)."""
    rc, stdout, err = _in_process(capsys, "llama_train", "--preset", "deepseek_v3", "--chip",
                                  "h100", "--nodes", "256", "--system", "h800-cluster",
                                  "--compiler", "none", "--format", "json")
    assert rc == 0, err
    out = json.loads(stdout)
    rows = {(row["layout"], row["mesh"]): row for row in out["layouts"]}
    ds = rows[("pp+dp_ep", "stage=16,data=2,expert=64")]
    assert ds["expert_Z"] == 64 and ds["stages"] == 16 and ds["a2a_level"] == "leaf"
    assert ds["book_bound"] == "comm" and ds["fits"] == "yes (book)"
    first = out["layouts"][0]
    assert first["analytic_s"] < ds["analytic_s"] and first["book_bound"] == "compute"
    notes = "\n".join(out["notes"])
    # gpus.md: 8 * C / W_node = 8 * 989e12 / 400e9 = 19,780 > F = 2048
    assert "F=2048 < 8*C/W_node=19,780: EP stays within 1-2 nodes" in notes
    assert "DeepSeek-V3 as published" in notes and "comm-bound" in notes
    for row in out["layouts"]:
        assert row["capacity"] in ("1", "1.25", "2", "dropless")


def test_deepseek_on_a_v5p_slice():
    cfg = workloads.make_config("llama_train", "deepseek_v3", {})
    found = experts.search(cfg, hardware.chip_entry("tpu-v5p"), (8, 16, 16), None,
                           experts.DEFAULT)
    assert found.kept and all(o.priced.need_bytes <= 95e9 + 1e9 for o in found.kept)
    best = found.kept[0]
    # the routed experts sharded over Z: an expert axis beats none at this size
    assert best.shape.get("expert", 1) > 1
    assert found.every[-1].step_s >= best.step_s


@pytest.mark.parametrize("args, says", [
    (("--preset", "tiny", "--layout", "ep"), "expert layouts need a MoE config"),
    (("--preset", "tiny_moe", "--layout", "pp+tp"), "not an expert layout plan ranks"),
])
def test_bad_options_one_line(capsys, args, says):
    rc, _, err = _in_process(capsys, *args, "--chip", "tpu-v5p", "--topology", "2x2x2",
                             "--compiler", "none")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "valid" in lines[0]


def test_bad_option_exits_2_from_the_shell():
    r = _cli("--preset", "tiny_moe", "--layout", "pp+fsdp", "--chip", "tpu-v5p", "--topology",
             "2x2x2", "--compiler", "none")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "valid:" in r.stderr


@pytest.mark.heavy
def test_tiny_moe_compiles_and_ranks_on_cpu():
    """Two XLA:CPU compiles (about a minute each on a loaded host): the best expert layout and
    the best overall, ranked by the predicted step beside the book."""
    r = _cli("llama_train", "--preset", "tiny_moe", "--chip", "tpu-v5p", "--topology", "2x2x2",
             "--compiler", "cpu", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["layouts"]
    compiled = [row for row in rows if row["predicted_step_s"] is not None]
    assert any(row["expert_Z"] > 1 for row in compiled)
    assert rows[0] in compiled
