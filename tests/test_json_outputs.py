"""Every JSON the tool prints or writes is strict JSON (RFC 8259), which has no NaN or Infinity
(JavaScript's ``JSON.parse`` and most parsers but Python's reject them): a figure that does not
apply is ``null``. Each output is parsed here with those words refused."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli, report, schema
from harness.analysis.gaps import by_category, join, summary
from harness.record import Run
from harness.runs.pipeline import analyze_trace
from harness.units import json_text, jsonable

FIXTURES = Path(__file__).parent / "fixtures"
EXTERNAL = sorted(p for p in (FIXTURES / "external").iterdir() if p.is_dir())
NIGHTS = FIXTURES / "history"
TPU = FIXTURES / "external" / "tpu-v6e-inference"


@pytest.fixture(autouse=True)
def _keep_xla_flags(monkeypatch):
    # harness.cli.main sets XLA_FLAGS (the CPU device count): put it back after each test
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))


def _refuse(word: str):
    raise ValueError(f"{word} is not JSON")


def strict(text: str):
    """``text`` parsed as JSON with NaN, Infinity and -Infinity refused."""
    return json.loads(text, parse_constant=_refuse)


def _harness(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue()


def test_the_parser_here_refuses_what_json_has_no_word_for():
    for bad in ('{"efficiency": NaN}', "[Infinity]", "[-Infinity]"):
        with pytest.raises(ValueError):
            strict(bad)
    assert strict('{"efficiency": null}') == {"efficiency": None}


def test_json_text_writes_null_for_every_figure_that_is_no_number():
    obj = {"nan": math.nan, "inf": np.float64(np.inf), "list": [1, np.int64(2), (-math.inf,)],
           "array": np.array([0.5, np.nan]), 3: "int key", ("a", 1): "tuple key", "path": TPU}
    assert strict(json_text(obj)) == {
        "nan": None, "inf": None, "list": [1, 2, [None]], "array": [0.5, None],
        "3": "int key", "('a', 1)": "tuple key", "path": str(TPU)}
    assert jsonable(True) is True and jsonable(None) is None


def test_a_report_with_nothing_priced_says_null_not_nan():
    # every op unmodeled (no instruction of its name in the HLO): the run's efficiency is NaN
    measured = pd.DataFrame({
        schema.PROGRAM: ["p"], schema.OP: ["mystery.1"], schema.COUNT: [1],
        schema.MEASURED_S: [1e-3], schema.MEASURED_MIN_S: [1e-3], schema.MEASURED_MAX_S: [1e-3],
        schema.DEVICES: [1]})
    predicted = pd.DataFrame({c: [] for c in schema.OPS_PREDICTED})
    ops = join(measured, predicted)
    summ = summary(ops, step_s=1e-3, peak_flops_per_s=1e12, devices=1)
    assert math.isnan(summ[schema.EFFICIENCY])
    run = Run(title="t", ops=ops, categories=by_category(ops), summary=summ,
              step={schema.STEP_S: 1e-3, schema.EXPOSED_COMM_S: math.nan})
    out = strict(report.render(run, "json"))
    assert out[schema.SUMMARY][schema.EFFICIENCY] is None
    assert out[schema.STEP_OBJECT][schema.EXPOSED_COMM_S] is None
    assert out["categories"][0][schema.EFFICIENCY] is None


@pytest.mark.parametrize("fixture", EXTERNAL, ids=lambda p: p.name)
def test_harness_trace_json_is_strict_in_print_and_file(fixture, tmp_path):
    code, printed = _harness("trace", fixture, "--program", "all", "--format", "json",
                             "--json", tmp_path / "r.json")
    assert code == 0
    report = strict(printed)
    assert strict((tmp_path / "r.json").read_text()) == report
    assert report["ops"] and report[schema.SUMMARY]


def test_the_tpu_reports_left_out_efficiencies_are_null(tmp_path):
    code, printed = _harness("trace", TPU, "--format", "json")
    assert code == 0
    report = strict(printed)
    ops = {r[schema.OP]: r for r in report["ops"]}
    assert ops["copy-done.1"][schema.EFFICIENCY] is None  # a 3 ns wait on a 168 ms transfer
    assert ops["copy-done.1"][schema.WAIT_S] == pytest.approx(3e-9)
    cats = {r[schema.CATEGORY]: r for r in report["categories"]}
    assert cats["copy"][schema.EFFICIENCY] is None


def test_a_saved_runs_meta_json_is_strict(tmp_path):
    run = analyze_trace(TPU, chip="tpu-v6e")
    run.summary["nothing_priced"] = math.nan  # a figure that does not apply, as NaN
    path = run.save(tmp_path / "run")
    meta = strict((path / "meta.json").read_text())
    assert meta[schema.SUMMARY]["nothing_priced"] is None
    back = Run.load(path)  # read back: the null is a figure that does not apply, as NaN was
    assert back.summary[schema.EFFICIENCY] == pytest.approx(run.summary[schema.EFFICIENCY])
    assert back.summary["nothing_priced"] is None
    assert strict(report.render(back, "json"))[schema.SUMMARY]["nothing_priced"] is None
    assert "nothing_priced" not in report.render(back, "text")  # left out, not shown as 0


def test_history_json_is_strict_in_print_and_file(tmp_path):
    code, printed = _harness("history", NIGHTS, "--format", "json", "--json", tmp_path / "h.json")
    assert code in (0, 1)
    assert strict((tmp_path / "h.json").read_text()) == strict(printed)


def test_compare_json_is_strict_in_print_and_file(tmp_path):
    code, printed = _harness("compare", NIGHTS / "night-01", NIGHTS / "night-10", "--format",
                             "json", "--json", tmp_path / "c.json")
    assert code in (0, 1)
    assert strict((tmp_path / "c.json").read_text()) == strict(printed)


def test_explain_json_is_strict(tmp_path):
    # a trace's collectives (the TPU fixture's psum): the COLLECTIVES table as JSON
    code, _ = _harness("explain", TPU, "--program", "all", "--json", tmp_path / "e.json")
    assert code == 0
    rows = strict((tmp_path / "e.json").read_text())
    assert [r[schema.OP] for r in rows] == ["all-reduce"]


def test_predict_json_is_strict():
    code, printed = _harness("predict", "collective", "all-gather", "--bytes", "1e9", "--mesh",
                             "4", "--chip", "tpu-v5e", "--format", "json")
    assert code == 0
    assert strict(printed)


def test_predict_hlo_json_is_strict():
    code, printed = _harness("predict-hlo", "matmul", "--mesh", "2x2", "--chip", "tpu-v5e",
                             "--format", "json")
    assert code == 0
    assert strict(printed)["chips"]


@pytest.mark.slow  # two layouts compiled: about two minutes on two shared cores
def test_plan_json_is_strict(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_HARNESS_CACHE", str(tmp_path))
    code, printed = _harness("plan", "--chip", "tpu-v5p", "--topology", "2x2x2", "--compiler",
                             "cpu", "--layout", "fsdp", "--layout", "tp", "--batch", "8seq",
                             "--seq-len", "16", "--format", "json")
    assert code == 0
    assert strict(printed)["layouts"]
