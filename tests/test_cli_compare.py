"""``harness compare`` on directories as CI keeps them: pairing, the verdict object, JUnit, the
baseline picked by name, exit codes and one-line errors; on hand-made stored runs."""
import json
import xml.etree.ElementTree as ET

import pytest
from test_regress_judge import save

from harness import schema
from harness.cli import main


def run_cli(capsys, *argv):
    try:
        code = main(["compare", *map(str, argv)])
    except SystemExit as e:  # argparse's one-line errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def nightly(root, name, slow=None, when="2026-11-24T00:00:00", sha=None, tests=("a", "b")):
    """A pytest --harness-save directory: one run per test (``slow``: test -> step factor)."""
    for t in tests:
        f = (slow or {}).get(t, 1.0)
        run = save(root / name, f"2026-{t}", test=f"test_model.py::test_{t}", step_ms=10.0 * f,
                   cpu=f)
        meta = json.loads((run / "meta.json").read_text())
        meta.update({schema.TIME: when, **({schema.GIT_SHA: sha} if sha else {})})
        (run / "meta.json").write_text(json.dumps(meta))
    return root / name


def test_the_same_code_twice_exits_0(tmp_path, capsys):
    code, out, _ = run_cli(capsys, nightly(tmp_path, "base"), nightly(tmp_path, "cand"))
    assert code == 0
    assert out.splitlines()[-1] == "OK: 2 ok of 2 pair(s)"
    assert "test_model.py::test_a: OK (noise)" in out


def test_a_slower_test_exits_1_and_is_named(tmp_path, capsys):
    code, out, _ = run_cli(capsys, nightly(tmp_path, "base"),
                           nightly(tmp_path, "cand", slow={"b": 2.0}))
    assert code == 1
    assert out.splitlines()[-1] == ("REGRESSION: 1 regression, 1 ok of 2 pair(s) "
                                    "(test_model.py::test_b)")


def test_unpaired_runs_are_listed_not_compared(tmp_path, capsys):
    code, out, _ = run_cli(capsys, nightly(tmp_path, "base", tests=("a", "b")),
                           nightly(tmp_path, "cand", tests=("a", "c")))
    assert code == 0
    assert "baseline only (unpaired): test_model.py::test_b" in out
    assert "candidate only (unpaired): test_model.py::test_c" in out
    assert out.splitlines()[-1] == "OK: 1 ok of 1 pair(s)"


def test_two_runs_named_are_one_pair_whatever_they_ran(tmp_path, capsys):
    a = save(tmp_path, "a", test="test_x.py::test_layout_1")
    b = save(tmp_path, "b", test="test_x.py::test_layout_2", step_ms=20.0, cpu=2.0)
    code, out, _ = run_cli(capsys, a, b)
    assert code == 1 and "test_x.py::test_layout_2: REGRESSION (same program)" in out


def test_a_sweep_directory_pairs_its_points(tmp_path, capsys):
    for side, f in (("sweep-1", 1.0), ("sweep-2", 3.0)):
        for point in ("no_comm", "allgather"):  # runs/<workload>-<key>/<run-id>/, as sweeps do
            run = save(tmp_path / side / "runs" / f"matmul-{point}", "20261124-000000-matmul",
                       test="", step_ms=10.0 * (f if point == "allgather" else 1.0),
                       cpu=f if point == "allgather" else 1.0)
            meta = json.loads((run / "meta.json").read_text())
            meta.update({schema.WORKLOAD: "matmul", schema.PRESET: "tiny",
                         schema.OVERRIDES: {"case": point}, schema.MESH: {"X": 4, "Y": 2}})
            (run / "meta.json").write_text(json.dumps(meta))
        (tmp_path / side / "manifest.json").write_text("{}")
    code, out, _ = run_cli(capsys, tmp_path / "sweep-1", tmp_path / "sweep-2")
    assert code == 1
    assert "matmul tiny case=allgather mesh 4x2: REGRESSION" in out
    assert "matmul tiny case=no_comm mesh 4x2: OK" in out


def test_json_and_junit_files_for_ci(tmp_path, capsys):
    verdict, report = tmp_path / "verdict.json", tmp_path / "junit.xml"
    code, _, _ = run_cli(capsys, nightly(tmp_path, "base"),
                         nightly(tmp_path, "cand", slow={"a": 2.0}), "--json", verdict,
                         "--junit", report)
    assert code == 1
    obj = json.loads(verdict.read_text())
    assert obj[schema.VERDICT] == "regression"
    assert obj["rule"] == {"fail_on": {"step": 0.1}, "alpha": 0.01, "host": 0.1, "noise": 0.05}
    pairs = {p["name"]: p for p in obj["pairs"]}
    assert pairs["test_model.py::test_a"][schema.VERDICT] == "regression"
    assert pairs["test_model.py::test_a"][schema.CHANGE] == pytest.approx(1.0)
    fusion = next(o for o in pairs["test_model.py::test_a"]["ops"] if o[schema.OP] == "fusion.1")
    assert fusion[schema.PREDICTED_CHANGE] == pytest.approx(0.0)  # measured, not predicted
    assert pairs["test_model.py::test_b"][schema.VERDICT] == "ok"
    suite = ET.parse(report).getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "2", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["test_model.py::test_a"].find("failure").get("message") == \
        "regression (same program)"
    assert cases["test_model.py::test_b"].find("failure") is None


def test_json_to_stdout(tmp_path, capsys):
    code, out, _ = run_cli(capsys, nightly(tmp_path, "base"), nightly(tmp_path, "cand"),
                           "--format", "json")
    assert code == 0 and json.loads(out)["headline"] == "OK: 2 ok of 2 pair(s)"


def test_markdown_is_a_ci_comment(tmp_path, capsys):
    code, out, _ = run_cli(capsys, nightly(tmp_path, "base"),
                           nightly(tmp_path, "cand", slow={"a": 2.0}), "--format", "md")
    assert code == 1
    assert out.splitlines()[0].startswith("## harness compare: ")
    assert "**REGRESSION**: 1 regression, 1 ok of 2 pair(s)" in out
    assert "| figure | baseline | candidate | change |" in out


def test_fail_on_sets_the_threshold(tmp_path, capsys):
    base, cand = nightly(tmp_path, "base"), nightly(tmp_path, "cand", slow={"a": 1.3})
    assert run_cli(capsys, base, cand)[0] == 1
    assert run_cli(capsys, base, cand, "--fail-on", "step=50%")[0] == 0


def test_baseline_by_name_under_a_results_root(tmp_path, capsys):
    root = tmp_path / "results"
    nightly(root, "night-1", when="2026-11-20T01:00:00", sha="aaaa1111")
    nightly(root, "night-2", slow={"a": 3.0}, when="2026-11-22T01:00:00", sha="bbbb2222")
    cand = nightly(tmp_path, "tonight", slow={"a": 3.0})
    # latest: night-2, as slow as tonight
    assert run_cli(capsys, cand, "--root", root)[0] == 0
    assert run_cli(capsys, cand, "--root", root, "--baseline", "latest")[0] == 0
    assert run_cli(capsys, cand, "--root", root, "--baseline", "aaaa")[0] == 1  # a commit
    assert run_cli(capsys, cand, "--root", root, "--baseline", "2026-11-21")[0] == 1  # a date


def test_list_shows_every_run_under_the_root(tmp_path, capsys):
    nightly(tmp_path, "night-1", sha="aaaa1111")
    assert main(["list", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("aaaa1111") == 2 and "night-1/2026-a" in out
    assert "test_model.py::test_b" in out


def _one_line_error(capsys, *argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("harness compare: error: ") and err.count("\n") == 1
    return err


def test_bad_input_is_one_line(tmp_path, capsys):
    base = nightly(tmp_path, "base")
    (tmp_path / "empty").mkdir()
    assert "no such run directory" in _one_line_error(capsys, base, tmp_path / "nope")
    assert "holds no runs" in _one_line_error(capsys, base, tmp_path / "empty")
    assert "give METRIC=PCT" in _one_line_error(capsys, base, base, "--fail-on", "step")
    assert "unknown; valid: step, efficiency" in _one_line_error(capsys, base, base,
                                                                 "--fail-on", "speed=1%")
    assert "--baseline must be latest" in _one_line_error(capsys, base, "--root", tmp_path,
                                                          "--baseline", "yesterday")
    assert "CANDIDATE with --baseline" in _one_line_error(capsys, base, base,
                                                          "--baseline", "latest")
    other = nightly(tmp_path, "other", tests=("z",))
    assert "no run of" in _one_line_error(capsys, base, other)
