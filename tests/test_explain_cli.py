"""harness explain on a profiler trace made here and on a stored run: measured and exposed
times joined to each collective, one-line errors, exit 0 when there is nothing to explain."""
import inspect
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness import report, schema
from harness.cli import main
from harness.record import Run
from harness.runs.pipeline import analyze_trace


def _layer(x, w):
    return jnp.tanh(x @ w)  # contracting dim sharded over X in both: all-reduce over X


def _trace(out: Path, specs) -> Path:
    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((128, 256)), NamedSharding(mesh, specs[0]))
    w = jax.device_put(jnp.ones((256, 64)), NamedSharding(mesh, specs[1]))
    f = jax.jit(_layer)
    f(x, w).block_until_ready()
    jax.profiler.start_trace(str(out))
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("step", step_num=i):
            f(x, w).block_until_ready()
    jax.profiler.stop_trace()
    return out


@pytest.fixture(scope="module")
def partial_sums(tmp_path_factory):
    return _trace(tmp_path_factory.mktemp("explain") / "trace", (P(None, "X"), P("X", None)))


def _line() -> str:
    lines, first = inspect.getsourcelines(_layer)
    return f"{Path(__file__).name}:{first + 1}"


def test_trace_collectives_carry_measured_and_exposed_time(partial_sums):
    run = analyze_trace(partial_sums, chip="cpu", mesh={"X": 4, "Y": 2})
    table = run.collectives
    row = table[table[schema.COLLECTIVE] == "all-reduce"].iloc[0]
    assert row[schema.MESH_AXES] == "X" and row[schema.REASON] == "case 3: partial sums"
    assert row[schema.SOURCE_LINE].endswith(_line())
    ops = run.ops.set_index(schema.OP)
    assert row[schema.PREDICTED_S] == ops.loc[row[schema.OP], schema.PREDICTED_S] > 0
    # its time and exposed part are the step object's, both from the timeline, so the exposed
    # part is a part of it (the OPS table's measured_s on a CPU host is a share of the cores)
    listed = {c[schema.OP]: c for c in run.step[schema.STEP_COLLECTIVES]}[row[schema.OP]]
    assert row[schema.MEASURED_S] == listed[schema.COMM_S] > 0
    assert row[schema.EXPOSED_COMM_S] == listed[schema.EXPOSED_COMM_S] <= row[schema.MEASURED_S]
    # the same table in the reports
    assert "case 3: partial sums" in report.render(run, "html")
    explained = json.loads(report.render(run, "json"))["collectives"]
    assert explained[0][schema.REASON] == row[schema.REASON]


def test_cli_on_a_trace_and_on_the_stored_run(partial_sums, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["explain", str(partial_sums), "--chip", "cpu", "--mesh", "X=4,Y=2",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "case 3: partial sums" in printed and _line() in printed and "fix:" in printed
    assert json.loads(out.read_text())[0][schema.MESH_AXES] == "X"
    run = analyze_trace(partial_sums, chip="cpu", mesh={"X": 4, "Y": 2})
    stored = run.save(tmp_path / "run")
    assert Run.load(stored).collectives[schema.REASON].tolist() == \
        run.collectives[schema.REASON].tolist()
    assert main(["explain", str(stored)]) == 0
    assert "all-reduce" in capsys.readouterr().out


def test_without_a_mesh_the_device_groups_are_printed(partial_sums):
    row = analyze_trace(partial_sums, chip="cpu").collectives.iloc[0]
    assert row[schema.MESH_AXES] == "{0,2,4,6} {1,3,5,7}"  # X of a row-major 4x2 mesh
    assert not math.isnan(row[schema.MEASURED_S])


def test_no_collectives_says_so(tmp_path, capsys):
    trace = _trace(tmp_path / "local", (P("X", None), P(None, "Y")))  # case 1: all local
    assert main(["explain", str(trace), "--chip", "cpu"]) == 0
    assert "no collectives" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["explain", "/no/such/run"], "no such run directory or trace file"),
    (["explain", ".", "--mesh", "X=4,X=2"], "named twice"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# --- compiled HLO text, not run (an XLA dump, compiled.as_text()) ---------------------------

TPU_HLO = Path(__file__).parent / "fixtures" / "tpu" / "matmul_allgather.hlo.txt"


def test_hlo_text_is_explained_without_a_run(tmp_path, capsys):
    # libtpu's compile of X[B, D_X] . Y[D, F] on a 2x2 v5e mesh: AllGather_X of X (case 2)
    out = tmp_path / "c.json"
    assert main(["explain", str(TPU_HLO), "--mesh", "2x2", "--chip", "tpu-v5e",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "HLO text, not run" in printed and "case 2: operand gathered" in printed
    (row,) = json.loads(out.read_text())
    assert row[schema.MESH_AXES] == "X" and row[schema.MEASURED_S] is None
    # its roofline time on the chip named: the gathered bf16[256, 512] over the v5e ICI
    from harness.hlo import hlo_costs, parse_module
    ops = hlo_costs(parse_module(TPU_HLO.read_text()), "tpu-v5e").set_index(schema.OP)
    assert row[schema.PREDICTED_S] == pytest.approx(ops.loc[row[schema.OP], schema.PREDICTED_S],
                                                    rel=1e-4)  # JSON keeps 5 digits


def test_a_mesh_that_does_not_hold_the_programs_devices_is_refused(capsys):
    assert main(["explain", str(TPU_HLO), "--mesh", "X=4,Y=2"]) == 2
    assert "has 8 devices; the program runs on 4" in capsys.readouterr().err


def test_format_prints_the_report_as_markdown_json_or_csv(tmp_path, capsys):
    argv = ["explain", str(TPU_HLO), "--mesh", "2x2", "--chip", "tpu-v5e"]
    table = tmp_path / "c.json"
    assert main([*argv, "--json", str(table)]) == 0
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out,  # strict: NaN would not parse
                         parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert printed["collectives"] == json.loads(table.read_text())  # the --json file's rows
    assert "HLO text, not run" in printed["title"] and printed["repeated_work"] == []
    assert main([*argv, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(printed["collectives"]) and schema.REASON in lines[0]
    assert main([*argv, "--format", "md"]) == 0
    md = capsys.readouterr().out
    op = printed["collectives"][0][schema.OP]
    assert md.startswith("## ") and f"| {op} |" in md and f"- `{op}`: " in md
