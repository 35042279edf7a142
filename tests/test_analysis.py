"""The whole pipeline on a user's jitted function and on a registered workload."""
import json
import math
from pathlib import Path

import pytest

import harness
import harness.record.run as hrun
from harness import report, schema
from harness.record import Run, store


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
    md = report.render(analysis, "md")
    assert "## Ops ranked by gap" in md and "roofline.png" in md
    html = report.render(analysis, "html")
    assert html.startswith("<!doctype html>") and "data:image/png;base64," in html
    data = json.loads(report.render(analysis, "json"))
    assert len(data["ops"]) == len(analysis.ops)
    with pytest.raises(harness.errors.HarnessError, match="choose from"):
        report.render(analysis, "pdf")


def test_the_cli_offers_every_report_format_and_only_those():
    assert tuple(sorted(report.FORMATS)) == schema.REPORT_FORMATS


def test_saved_run_round_trips(analysis, tmp_path):
    path = analysis.save(tmp_path / "run-1", files=report.files)  # as harness run stores one
    for name in ("meta.json", "ops.parquet", "ops.csv", "steps.parquet", "report.md",
                 "report.html", "roofline.png", "trace"):
        assert (path / name).exists(), name
    loaded = Run.load(path)
    assert list(loaded.ops[schema.OP]) == list(analysis.ops[schema.OP])
    assert loaded.meta["chip"] == analysis.chip.name
    assert loaded.summary == pytest.approx(analysis.summary, nan_ok=True)
    assert loaded.notes == analysis.notes and loaded.title == analysis.title
    # the same report, read back
    assert report.render(loaded, "json") == report.render(analysis, "json")
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
    from harness.units import fmt_seconds

    assert fmt_seconds(999.8e-6) == "1 ms"
    assert fmt_seconds(1.5e-6) == "1.5 us"
    assert fmt_seconds(2.0) == "2 s"
    assert fmt_seconds(3e-9) == "3 ns"


def test_resolve_rejects_missing_paths(tmp_path):
    with pytest.raises(harness.errors.HarnessError, match="no such run"):
        store.resolve(tmp_path / "absent", root=tmp_path)


def test_predicting_for_another_chip_says_so():
    from types import SimpleNamespace

    from harness.chip.resolve import resolve_chip

    cpu = SimpleNamespace(device_kind="cpu", platform="cpu")
    entry, notes, _ = resolve_chip("tpu-v5e", cpu)
    assert entry.name == "tpu-v5e" and "measured on cpu" in notes[0]
    unknown = SimpleNamespace(device_kind="NVIDIA L4", platform="gpu")
    entry, notes, _ = resolve_chip("h100", unknown)
    assert "measured on NVIDIA L4" in notes[0]
    h100 = SimpleNamespace(device_kind="NVIDIA H100 80GB HBM3", platform="gpu")
    assert resolve_chip("h100", h100)[1] == []


def test_the_calibrated_cpu_chip_is_a_value_and_the_registry_stays_as_shipped(analysis):
    from harness.chip import calibration, drift
    from harness.chip.resolve import chip_for_run, resolve_chip
    from predictions import hardware

    shipped = hardware.CHIPS["cpu"]
    assert resolve_chip()[0] is shipped  # a look-up never calibrates
    entry, notes, meta = chip_for_run()  # the run path's explicit step: this host's calibration
    cal = calibration.cached(meta[schema.CALIBRATION]["device_count"])
    assert entry == calibration.to_chip(cal) and entry is not shipped
    # the run's own: that calibration scaled by the host's speed around it (the probe), as
    # every CPU run's is; unscaled when the host moved too much during it to say (NaN)
    f = analysis.meta[drift.HOST_DRIFT][drift.FACTOR]
    assert analysis.chip == (entry if math.isnan(f) else drift.scaled(entry, f))
    assert analysis.meta[schema.CHIP] == "cpu"
    assert hardware.CHIPS["cpu"] is shipped
    assert any("share the host's cores" in n for n in notes)


def test_a_run_stored_by_the_previous_version_reads_back_as_it_printed(tmp_path):
    """A nightly job's baselines survive the upgrade: a quick-sweep point stored by ab45c76
    (run format 1: no format key) loads, and renders the JSON report `harness report` printed
    for it then (saved beside it, .report.json), figure for figure. Two differences are
    deliberate (run format 3): what the summary called ``step_s`` (the untraced wall time) is
    named ``wall_step_s``, and the report carries a step object, empty for a run stored before
    the step was measured; and a memory section (issue 56), for a run made without
    ``--memory`` a note saying how to get one."""
    old = Path(__file__).parent / "fixtures" / "runs" / "format1-matmul"
    assert "format" not in json.loads((old / "meta.json").read_text())
    printed = json.loads((old.parent / "format1-matmul.report.json").read_text())
    run = Run.load(old)
    again = json.loads(report.render(run, "json"))
    assert again.pop(schema.STEP_OBJECT) == {}
    assert "harness run --memory" in again.pop(schema.MEMORY)["note"]
    then = printed[schema.SUMMARY]
    assert again[schema.SUMMARY] == {(schema.WALL_STEP_S if k == "step_s" else k): v
                                     for k, v in then.items()}
    assert again[schema.SUMMARY][schema.WALL_STEP_S] == then["step_s"] == 0.012714253000012832
    assert {k: v for k, v in again.items() if k != schema.SUMMARY} == \
        {k: v for k, v in printed.items() if k != schema.SUMMARY}
    assert run.meta["git_sha"] == "ab45c7603a50"


@pytest.fixture(scope="module")
def donated_step(tmp_path_factory):
    """A training step as users write one: it donates its parameters and takes its learning
    rate as a keyword argument."""
    import functools

    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(w_DF, x_BD, *, lr):
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x_BD @ w) ** 2))(w_DF)
        return w_DF - lr * g, loss

    w = jnp.ones((256, 128)) * 0.01
    x = jnp.ones((64, 256))
    run = harness.analyze(train_step, w, x, lr=0.1, steps=3, warmup=1,
                          out_dir=tmp_path_factory.mktemp("donated"))
    return run, w


def test_a_donated_training_step_with_keyword_arguments_is_analysed(donated_step):
    run, w = donated_step
    # each step got its own copy of the donated parameters: the user's are untouched
    assert not w.is_deleted() and float(w.sum()) == pytest.approx(0.01 * 256 * 128)
    # forward x @ w and the gradient x^T @ g: two dots of 2*64*256*128 FLOPs each
    dots = run.ops[run.ops[schema.CATEGORY] == "matmul"]
    assert len(dots) >= 2
    assert set(run.summary) >= {schema.STEP_S, schema.COVERAGE}
    assert run.summary[schema.HLO_FLOPS_PER_DEVICE] >= 2 * (2 * 64 * 256 * 128)


def test_carry_threads_a_steps_outputs_into_the_next(tmp_path):
    import jax
    import jax.numpy as jnp

    seen = []

    def carry(args, out):
        seen.append(float(out[0]))
        return (out[1],)

    step = jax.jit(lambda n: ((n @ n).sum(), n + 1.0), donate_argnums=0)
    harness.analyze(step, jnp.zeros((128, 128)), steps=2, warmup=1, carry=carry,
                    out_dir=tmp_path)
    # warm-up, 2 traced and 2 untraced steps on n = k (k = 0..4) everywhere: n @ n sums to
    # 128 * 128 entries of 128 k^2
    assert seen == [128.0 ** 3 * k * k for k in range(5)]


def test_a_run_saved_without_plots_draws_none(analysis, tmp_path, monkeypatch):
    """A sweep point is stored without plots: no PNG, none embedded, and none drawn."""
    from harness.report import plots

    drawn = []
    monkeypatch.setattr(plots, "roofline", lambda *a, **k: drawn.append(1))
    monkeypatch.setattr(plots, "category_bars", lambda *a, **k: drawn.append(1))
    bare = hrun.Run(title=analysis.title, meta=dict(analysis.meta), ops=analysis.ops,
                    categories=analysis.categories, summary=analysis.summary,
                    chip=analysis.chip)
    path = bare.save(tmp_path / "bare", files=lambda r: report.files(r, plots=False))
    assert drawn == [] and not list(path.glob("*.png"))
    assert "data:image/png" not in (path / "report.html").read_text()


def test_the_librarys_save_stores_the_data_and_its_report_is_the_callers(analysis, tmp_path):
    """``run.save`` writes the run's data; the report beside it is what a command passes
    (``harness.report.files``). The commit is the capture's, in the meta as the run had it."""
    path = analysis.save(tmp_path / "data")
    names = {p.name for p in path.iterdir()}
    assert {"meta.json", "ops.parquet", "ops.csv", "steps.parquet"} <= names
    assert not names & {"report.md", "report.html", "roofline.png", "step.png"}
    meta = json.loads((path / "meta.json").read_text())
    assert meta.get(schema.GIT_SHA) == analysis.meta.get(schema.GIT_SHA)
    assert report.render(Run.load(path), "json") == report.render(analysis, "json")
