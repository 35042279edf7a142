"""``harness compare``: exit codes, output formats, bad input; on synthetic stored runs."""
import io
import json
import shutil

import pandas as pd
import pytest
from test_runs_regress import save

import harness.runs.run as hrun
from harness import schema
from harness.cli import main
from harness.runs import regress


def run_cli(capsys, *argv):
    code = main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def base(tmp_path):
    return save(tmp_path, "base")


def test_identical_runs_exit_0(tmp_path, base, capsys):
    code, out, _ = run_cli(capsys, base, save(tmp_path, "same"))
    assert code == 0
    assert out.strip().splitlines()[-1].startswith("OK: no regression")


def test_runs_within_noise_exit_0(tmp_path, capsys):
    b = save(tmp_path, "b", jitter=0.03, seed=1)
    c = save(tmp_path, "c", jitter=0.03, seed=2)
    assert run_cli(capsys, b, c)[0] == 0


def test_op_twice_as_slow_exits_1_and_names_it(tmp_path, base, capsys):
    code, out, _ = run_cli(capsys, base, save(tmp_path, "slow", {"fusion.7": 2.0}))
    assert code == 1
    last = out.strip().splitlines()[-1]
    assert last.startswith("REGRESSION: fusion.7;")
    assert "fusion.7 (elementwise, memory-bound) fell from 50% to 25% of its roofline" in out


def test_tiny_op_twice_as_slow_exits_0(tmp_path, base, capsys):
    assert run_cli(capsys, base, save(tmp_path, "tiny", {"copy.1": 2.0}))[0] == 0


def _double_op_on_disk(run_dir, op):
    """Edit a stored run in place: the op's per-step samples and median time double."""
    ops = pd.read_parquet(run_dir / hrun.OPS_PARQUET)
    steps = pd.read_parquet(run_dir / hrun.STEPS_PARQUET)
    hit = ops[schema.OP] == op
    ops.loc[hit, schema.MEASURED_S] *= 2
    ops.loc[hit, schema.EFFICIENCY] /= 2
    steps.loc[steps[schema.OP] == op, schema.MEASURED_S] *= 2
    ops.to_parquet(run_dir / hrun.OPS_PARQUET, index=False)
    steps.to_parquet(run_dir / hrun.STEPS_PARQUET, index=False)


def test_acceptance_edited_stored_run_2x_slower_on_one_op(tmp_path, base, capsys):
    cand = tmp_path / "edited"
    shutil.copytree(base, cand)
    assert run_cli(capsys, base, cand)[0] == 0  # an unedited copy is identical
    _double_op_on_disk(cand, "all-reduce.3")
    code, out, _ = run_cli(capsys, base, cand)
    assert code == 1 and out.strip().splitlines()[-1].startswith("REGRESSION: all-reduce.3;")
    code, out, _ = run_cli(capsys, base, cand, "--format", "json")
    assert code == 1
    rows = {r[schema.OP]: r for r in json.loads(out)}
    assert rows["all-reduce.3"][schema.VERDICT] == regress.REGRESSION
    assert rows["all-reduce.3"][schema.CHANGE] == pytest.approx(1.0)
    others = set(rows) - {"all-reduce.3", regress.STEP_TOTAL}
    assert {rows[o][schema.VERDICT] for o in others} == {regress.UNCHANGED}


def test_run_ids_resolve_under_root(tmp_path, base, capsys):
    save(tmp_path, "cand-slow", {"fusion.12": 2.0})
    code, out, _ = run_cli(capsys, "base", "cand-", "--root", tmp_path)
    assert code == 1 and "REGRESSION: fusion.12;" in out


def test_markdown_is_a_ci_comment(tmp_path, base, capsys):
    code, out, _ = run_cli(capsys, base, save(tmp_path, "slow", {"fusion.12": 2.0}),
                           "--format", "md")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "## harness compare: `base` → `slow`"
    assert lines[2].startswith("**REGRESSION**: fusion.12;")
    assert "| op | category | bound | baseline | candidate | change |" in out
    assert any(line.startswith("| fusion.12 | matmul | compute |") and "+100%" in line
               for line in lines)


def test_csv_stays_parseable_and_verdict_goes_to_stderr(tmp_path, base, capsys):
    code, out, err = run_cli(capsys, base, save(tmp_path, "slow", {"fusion.12": 2.0}),
                             "--format", "csv")
    assert code == 1
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == list(schema.REGRESS)
    assert len(df) == 1 + 4  # the step total and the four ops
    assert "REGRESSION: fusion.12;" in err


def test_top_never_hides_a_regression(tmp_path, base, capsys):
    slow = save(tmp_path, "slow2", {"fusion.12": 2.0, "all-reduce.3": 2.0})
    code, out, _ = run_cli(capsys, base, slow, "--top", "1", "--format", "json")
    assert code == 1
    assert {r[schema.OP] for r in json.loads(out)} == {regress.STEP_TOTAL, "fusion.12",
                                                    "all-reduce.3"}


def _one_line_error(capsys, *argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("harness compare: error: ") and err.count("\n") == 1
    return err


def test_missing_run_dir(tmp_path, base, capsys):
    err = _one_line_error(capsys, base, tmp_path / "nope")
    assert "nope: no such run directory" in err


def test_unknown_run_id(tmp_path, base, capsys):
    err = _one_line_error(capsys, "nope", base, "--root", tmp_path)
    assert "nope: no such run" in err


def test_dir_without_meta(tmp_path, base, capsys):
    (tmp_path / "empty").mkdir()
    err = _one_line_error(capsys, base, tmp_path / "empty")
    assert "not a run (no meta.json)" in err


def test_corrupt_ops_parquet(tmp_path, base, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(base, bad)
    (bad / hrun.OPS_PARQUET).write_bytes(b"PAR1 this is not parquet")
    err = _one_line_error(capsys, base, bad)
    assert "unreadable run table" in err


def test_bad_option_value(tmp_path, base, capsys):
    err = _one_line_error(capsys, base, base, "--alpha", "0")
    assert "alpha must be in (0, 1)" in err
