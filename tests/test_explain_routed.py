"""``harness explain`` prints an MoE's routed matmuls (``harness.explain.routed``) under its
collectives, in every format, on a user's ``shard_map`` MoE layer (tests/explain_programs.py):
E experts over Z devices, top-k routing, capacity factor 2. Expected figures are the shapes'
arithmetic (book §5.4: 2·T·k·D·F an expert matmul forward)."""
import io
import json

import explain_programs as ep
import jax
import pandas as pd
import pytest

from harness import schema
from harness.cli import main
from harness.runs.explained import explain_path

# per device: E/Z experts x Z·C slots, 2·D·F a slot; routed: the T·k copies of its tokens
COMPUTED = 2 * ep.MOE_E * ep.MOE_C * ep.MOE_D * ep.MOE_F
ROUTED = 2 * ep.MOE_T * ep.MOE_K * ep.MOE_D * ep.MOE_F
WASTE = 1 - 1 / ep.MOE_CAPACITY
MESH = f"expert={ep.MOE_Z}"


@pytest.fixture(scope="module")
def moe_hlo(tmp_path_factory):
    fn, args = ep.shard_map_moe()
    path = tmp_path_factory.mktemp("moe") / "moe.hlo.txt"
    path.write_text(fn.lower(*args).compile().as_text())
    return path


def _explain(capsys, path, fmt: str, mesh: str = MESH) -> str:
    assert main(["explain", str(path), "--mesh", mesh, "--format", fmt]) == 0
    return capsys.readouterr().out


def test_text_shows_the_routed_matmuls_after_the_collectives(moe_hlo, capsys):
    out = _explain(capsys, moe_hlo, "text")
    assert out.index("expert dispatch") < out.index("2 routed matmuls")
    table = out[out.index("2 routed matmuls"):]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and all("padded capacity" in r for r in rows)
    assert "\npadded capacity: every one of the E·C capacity slots computed" in table
    assert all(f" {COMPUTED} " in r and f" {ROUTED} " in r for r in rows)
    assert "waste (%)" in table and all(f" {100 * WASTE:.0f} " in r for r in rows)  # percent
    assert "routed_flops: the FLOPs of the routed token copies alone" in table  # its legend


def test_markdown_json_and_csv_carry_the_same_rows(moe_hlo, capsys):
    md = _explain(capsys, moe_hlo, "md")
    assert "### 2 routed matmuls" in md and md.count("| padded capacity |") == 2
    rows = json.loads(_explain(capsys, moe_hlo, "json"))["routed_matmuls"]
    assert [r[schema.FORM] for r in rows] == ["padded capacity"] * 2
    assert {r[schema.FLOPS] for r in rows} == {COMPUTED}
    assert {r[schema.ROUTED_FLOPS] for r in rows} == {ROUTED}
    assert {r[schema.WASTE] for r in rows} == {WASTE}
    assert all("dot_general" in r[schema.SOURCE_OP] for r in rows)
    collectives, routed = _explain(capsys, moe_hlo, "csv").split("\n\n")
    assert len(pd.read_csv(io.StringIO(collectives))) == 3  # dispatch, combine, the loss's sum
    routed = pd.read_csv(io.StringIO(routed))
    assert list(routed.columns) == list(schema.ROUTED)
    assert set(routed[schema.ROUTED_FLOPS]) == {ROUTED}


def test_a_program_without_routed_matmuls_prints_none(tmp_path, capsys):
    fn, args = ep.out_sharded()
    path = tmp_path / "mm.hlo.txt"
    path.write_text(fn.lower(*args).compile().as_text())
    out = _explain(capsys, path, "text", "X=4,Y=2")
    assert "routed matmul" not in out
    assert json.loads(_explain(capsys, path, "json", "X=4,Y=2"))["routed_matmuls"] == []
    assert "\n\n" not in _explain(capsys, path, "csv", "X=4,Y=2")


def test_on_a_trace_the_routed_matmuls_are_the_step_programs(tmp_path):
    fn, args = ep.shard_map_moe()
    fn(*args).block_until_ready()
    jax.profiler.start_trace(str(tmp_path / "trace"))
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("step", step_num=i):
            fn(*args).block_until_ready()
    jax.profiler.stop_trace()
    e = explain_path(tmp_path / "trace", chip="cpu", mesh=ep.MOE_MESH)
    assert list(e.routed[schema.FORM]) == ["padded capacity"] * 2
    assert set(e.routed[schema.ROUTED_FLOPS]) == {ROUTED}
    assert set(e.table[schema.REASON]) >= {"expert dispatch", "expert combine"}
