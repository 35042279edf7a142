"""The whole pipeline on a user's jitted function and on a registered workload."""
import json

import pytest

import harness
import harness.run as hrun
from harness import report, schema
from harness.run import Run
from harness.runs import store


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def mlp(x_BD, w_in_DF, w_out_FD):  # a Megatron-style MLP (training.md TP layout)
        return jnp.tanh(x_BD @ w_in_DF) @ w_out_FD

    x = jax.device_put(jnp.ones((256, 512)), NamedSharding(mesh, P("X", None)))
    w_in = jax.device_put(jnp.ones((512, 1024)) * 0.01, NamedSharding(mesh, P(None, "Y")))
    w_out = jax.device_put(jnp.ones((1024, 512)) * 0.01, NamedSharding(mesh, P("Y", None)))
    fn = jax.jit(mlp, out_shardings=NamedSharding(mesh, P("X", None)))
    return harness.analyze(fn, x, w_in, w_out, steps=3, warmup=1,
                           out_dir=tmp_path_factory.mktemp("an"))


def test_every_measured_op_is_predicted_or_unmodeled(analysis):
    ops = analysis.ops
    assert len(ops) > 0
    modeled = ops[schema.BOUND] != schema.UNMODELED
    assert (ops.loc[modeled, schema.PREDICTED_S] >= 0).all()
    assert ops.loc[~modeled, schema.PREDICTED_S].isna().all()
    assert analysis.summary["coverage"] >= 0.95
    assert set(ops[schema.CATEGORY]) >= {"matmul"}
    # the TP layout's partial sums over Y are reduced by a collective
    assert (ops[schema.CATEGORY] == "collective").any()


def test_ops_ranked_by_gap(analysis):
    gaps = list(analysis.ops[schema.GAP_S])
    assert gaps == sorted(gaps, reverse=True)


def test_reports_render(analysis):
    md = analysis.render("md")
    assert "## Ops ranked by gap" in md and "roofline.png" in md
    html = analysis.render("html")
    assert html.startswith("<!doctype html>") and "data:image/png;base64," in html
    data = json.loads(analysis.render("json"))
    assert len(data["ops"]) == len(analysis.ops)
    with pytest.raises(harness.errors.HarnessError, match="choose from"):
        analysis.render("pdf")


def test_the_cli_offers_every_report_format_and_only_those():
    assert tuple(sorted(report.FORMATS)) == schema.REPORT_FORMATS


def test_saved_run_round_trips(analysis, tmp_path):
    path = analysis.save(tmp_path / "run-1")
    for name in ("meta.json", "ops.parquet", "ops.csv", "steps.parquet", "report.md",
                 "report.html", "roofline.png", "trace"):
        assert (path / name).exists(), name
    loaded = Run.load(path)
    assert list(loaded.ops[schema.OP]) == list(analysis.ops[schema.OP])
    assert loaded.meta["chip"] == analysis.chip.name
    assert loaded.summary == pytest.approx(analysis.summary, nan_ok=True)
    assert loaded.notes == analysis.notes and loaded.title == analysis.title
    assert loaded.render("json") == analysis.render("json")  # the same report, read back
    assert json.loads((path / "meta.json").read_text())["format"] == hrun.FORMAT
    assert not list(tmp_path.glob(store.TMP_PREFIX + "*"))  # nothing half-written left


def test_a_run_saved_before_the_format_key_loads(analysis, tmp_path):
    path = analysis.save(tmp_path / "old")
    meta = json.loads((path / "meta.json").read_text())
    del meta["format"]  # as every run stored before the one Run was written
    (path / "meta.json").write_text(json.dumps(meta))
    assert list(Run.load(path).ops[schema.OP]) == list(analysis.ops[schema.OP])


def test_a_run_from_a_newer_harness_names_its_format(analysis, tmp_path):
    path = analysis.save(tmp_path / "new")
    meta = json.loads((path / "meta.json").read_text())
    meta["format"] = hrun.FORMAT + 1
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(harness.errors.HarnessError, match=f"run format {hrun.FORMAT + 1}"):
        Run.load(path)


def test_damaged_runs_give_one_line_errors(tmp_path):
    with pytest.raises(harness.errors.HarnessError, match="no such run"):
        Run.load(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    with pytest.raises(harness.errors.HarnessError, match="not a run"):
        Run.load(tmp_path / "r")
    (tmp_path / "r" / "meta.json").write_text("{")
    with pytest.raises(harness.errors.HarnessError, match="corrupt JSON"):
        Run.load(tmp_path / "r")


def test_seconds_format_at_unit_boundaries():
    from harness.report.tables import fmt_seconds

    assert fmt_seconds(999.8e-6) == "1 ms"
    assert fmt_seconds(1.5e-6) == "1.5 us"
    assert fmt_seconds(2.0) == "2 s"
    assert fmt_seconds(3e-9) == "3 ns"


def test_resolve_rejects_missing_paths(tmp_path):
    with pytest.raises(harness.errors.HarnessError, match="no such run"):
        store.resolve(tmp_path / "absent", root=tmp_path)


def test_predicting_for_another_chip_says_so():
    from types import SimpleNamespace

    from harness.chip import resolve_chip

    cpu = SimpleNamespace(device_kind="cpu", platform="cpu")
    entry, notes, _ = resolve_chip("tpu-v5e", cpu)
    assert entry.name == "tpu-v5e" and "measured on cpu" in notes[0]
    unknown = SimpleNamespace(device_kind="NVIDIA L4", platform="gpu")
    entry, notes, _ = resolve_chip("h100", unknown)
    assert "measured on NVIDIA L4" in notes[0]
    h100 = SimpleNamespace(device_kind="NVIDIA H100 80GB HBM3", platform="gpu")
    assert resolve_chip("h100", h100)[1] == []


def test_the_calibrated_cpu_chip_is_a_value_and_the_registry_stays_as_shipped(analysis):
    from harness.calibrate import chip as calibration
    from harness.chip import chip_for_run, resolve_chip
    from predictions import hardware

    shipped = hardware.CHIPS["cpu"]
    assert resolve_chip()[0] is shipped  # a look-up never calibrates
    entry, notes, meta = chip_for_run()  # the run path's explicit step: this host's calibration
    cal = calibration.cached(meta[schema.CALIBRATION]["device_count"])
    assert entry == calibration.to_chip(cal) and entry is not shipped
    assert analysis.chip == entry and analysis.meta[schema.CHIP] == "cpu"
    assert hardware.CHIPS["cpu"] is shipped
    assert any("share the host's cores" in n for n in notes)
