"""harness run / list / report / view on a stored run."""

import pytest

from harness.cli import main


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["run", "matmul", "--set", "case=allgather", "--steps", "2", "--warmup", "1",
                 "--out", str(root)]) == 0
    return root


def test_run_stores_one_complete_run(results, capsys):
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1 and runs[0].name.split("-")[2] == "matmul"
    for name in ("meta.json", "ops.parquet", "report.html", "report.md", "roofline.png"):
        assert (runs[0] / name).exists(), name
    assert not [p for p in results.iterdir() if p.name.startswith(".tmp-")]


def test_list_and_report(results, capsys):
    capsys.readouterr()
    assert main(["list", "--root", str(results)]) == 0
    out = capsys.readouterr().out
    run_id = next(p.name for p in results.iterdir() if p.is_dir())
    assert run_id in out and "matmul" in out
    assert main(["report", run_id[:20], "--root", str(results), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# matmul (tiny)") and "all-gather" in md


def test_report_of_missing_run_is_one_line(results, capsys):
    assert main(["report", "no-such-run", "--root", str(results)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_run_rejects_bad_input_in_one_line(results, capsys):
    for argv in (["run", "nope"], ["run", "matmul", "--mesh", "3x3"],
                 ["run", "matmul", "--set", "nope=1"], ["run", "matmul", "--chip", "tpu-v9"]):
        assert main(argv + ["--out", str(results)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("valid" in err[0] or "known" in err[0]), (argv, err)
