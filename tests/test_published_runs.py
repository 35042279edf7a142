"""The published, measured MaxText runs of docs/published-runs.md against the harness.

Fast: the tables are read from the page itself; each measured row is consistent with itself
(tokens/s/device = batch · T / step) and MaxText's logged TFLOP/s/device is the model FLOPs
``predictions`` counts (6 · matmul parameters · tokens + the book's attention, halved for the
causal mask where that MaxText version halves it) over the step. Slow, with libtpu:
``predict-hlo`` at the published config fits the chip and predicts a step that the measured
one does not beat and stays within 1/0.6 of (the issue's "measured MFU at most the predicted,
and at least 0.6 of it")."""
import json
import re
import shlex
from pathlib import Path

import pytest

import workloads
from harness.cli import main
from predictions import hardware, transformer
from workloads.llama.book import matmul_params
from workloads.llama.config import book_model

PAGE = Path(__file__).resolve().parents[1] / "docs" / "published-runs.md"


def _table(title: str) -> dict[str, dict[str, str]]:
    """The markdown table under the heading ``title``, as {run: {column: cell}}."""
    text = PAGE.read_text()
    body = text[text.index(f"## {title}"):].split("\n## ")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in body.splitlines() if line.startswith("|")]
    header, data = rows[0], [r for r in rows[2:]]
    return {r[0]: dict(zip(header, r)) for r in data}


MEASURED = _table("Measured")
PREDICTED = _table("Predicted")


def _config(run: str):
    """(predict-hlo arguments, workload config) of a run's `harness config` cell."""
    argv = shlex.split(PREDICTED[run]["harness config"].strip("`"))
    sets = dict(a.split("=", 1) for a in argv[argv.index("--set") + 1::2])
    preset = argv[argv.index("--preset") + 1]
    return argv, workloads.make_config("llama_train", preset, sets)


def test_every_measured_run_has_a_prediction_row():
    assert MEASURED and set(MEASURED) == set(PREDICTED)


# Slice names count TensorCores: a v5p chip holds two (megacore, `tpus.md`), a v6e chip one.
CORES_IN_NAME = {"v5p": 2, "v6e": 1}


@pytest.mark.parametrize("run", sorted(MEASURED))
def test_a_measured_row_is_consistent_with_itself(run):
    m = MEASURED[run]
    batch, T, step = int(m["batch/device"]), int(m["T"]), float(m["step s"])
    assert float(m["tokens/s/device"]) == pytest.approx(batch * T / step, rel=2e-4)
    _, cfg = _config(run)
    kind, n = re.fullmatch(r"(\w+)-(\d+)", m["slice"]).groups()
    chips = int(n) // CORES_IN_NAME[kind]
    assert (cfg.B, cfg.T) == (batch * chips, T)


# MaxText's attention FLOPs: its older tags count the whole T x T score matrix, as
# ``predictions.transformer`` does; later ones halve it for the causal mask
# (``calculate_tflops_training_per_device``). The table's "attention FLOPs" column says which.
ATTENTION_SHARE = {"full": 1.0, "causal half": 0.5}


def _model_flops(run: str, attention_share: float = 1.0) -> float:
    """FLOPs of one step per device: 6 · matmul parameters · tokens + the book's attention."""
    _, cfg = _config(run)
    tokens = int(MEASURED[run]["batch/device"]) * cfg.T          # per device
    model = book_model(cfg)
    return 6 * matmul_params(model) * tokens + attention_share * transformer.attention_flops(
        model, tokens, cfg.T, training=True)


@pytest.mark.parametrize("run", sorted(MEASURED))
def test_maxtexts_tflops_are_the_model_flops_predictions_counts(run):
    m = MEASURED[run]
    flops = _model_flops(run, ATTENTION_SHARE[m["attention FLOPs"]])
    assert flops / float(m["step s"]) / 1e12 == pytest.approx(float(m["TFLOP/s/device"]),
                                                               rel=1e-3)
    # the measured MFU counts the FLOPs the harness' MFU at the roofline counts (the whole
    # attention), whatever MaxText logged
    peak = hardware.chip_entry(PREDICTED[run]["chip"]).flops_per_s("bf16")
    assert float(PREDICTED[run]["measured MFU"].rstrip("%")) == pytest.approx(
        100 * _model_flops(run) / float(m["step s"]) / peak, abs=0.05)


# MaxText's libtpu flags for a run whose step needs them to compile (its recipe's
# ``xla_flags``: ``benchmarks/xla_flags_library.py`` at 3eb77db3c945, DENSE_VMEM_LIMIT_FLAG +
# CF_FOR_ALL_GATHER + HOST_OFFLOAD_FLAGS), set as LIBTPU_INIT_ARGS
LIBTPU_FLAGS = {"llama3.1-405b-v5p": " ".join([
    "--xla_tpu_scoped_vmem_limit_kib=98304",
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true", "--xla_enable_async_all_gather=true",
    "--xla_tpu_enable_all_experimental_scheduler_features=true",
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true",
    "--xla_tpu_host_transfer_overlap_limit=24", "--xla_tpu_aggressive_opt_barrier_removal=ENABLED",
    "--xla_lhs_prioritize_async_depth_over_stall=ENABLED",
    "--xla_tpu_enable_ag_backward_pipelining=true",
    "--xla_should_allow_loop_variant_parameter_in_chain=ENABLED",
    "--xla_should_add_loop_invariant_op_in_chain=ENABLED",
    "--xla_max_concurrent_host_send_recv=100",
    "--xla_tpu_scheduler_percent_shared_memory_limit=100",
    "--xla_latency_hiding_scheduler_rerun=2"])}


def _expect(run: str):
    why = PREDICTED[run]["status"]
    return () if why == "bound" else (pytest.mark.xfail(strict=True, reason=why),)


@pytest.mark.heavy  # real-size compiles, 3 to 10 min each on a 2-core host, so not in CI
@pytest.mark.libtpu
@pytest.mark.parametrize("run", [pytest.param(r, marks=_expect(r)) for r in sorted(MEASURED)])
def test_the_prediction_is_a_bound_the_measured_run_comes_close_to(run, capsys, monkeypatch):
    if run in LIBTPU_FLAGS:
        monkeypatch.setenv("LIBTPU_INIT_ARGS", LIBTPU_FLAGS[run])
    argv, _ = _config(run)
    assert main([*argv, "--format", "json"]) == 0
    chip = json.loads(capsys.readouterr().out)["chips"][0]
    assert chip["compile"] != "cpu" and chip["memory_fit"]["fits"]
    predicted, measured = chip["totals"]["predicted_step_s"], float(MEASURED[run]["step s"])
    assert 0.6 * measured <= predicted <= measured


# What a published run is from its shape alone: the model, slice, batch and sequence; predict-hlo
# sets the rest (the loss in chunks, remat and offload: harness.plan.search)
SHAPE_SETS = ("B", "T", "V", "parallelism")


def _shape_argv(run: str) -> list[str]:
    argv, _ = _config(run)
    out = argv[:argv.index("--set")]
    for key, value in (a.split("=", 1) for a in argv[argv.index("--set") + 1::2]):
        out += ["--set", f"{key}={value}"] if key in SHAPE_SETS else []
    return out


def test_a_runs_shape_leaves_its_memory_knobs_to_the_search():
    argv = _shape_argv("llama3.1-70b-v6e")
    assert argv[argv.index("--preset") + 1] == "70b" and "--compiler" in argv
    assert [a for a in argv if "=" in a] == ["parallelism=fsdp", "B=1280", "T=8192"]


@pytest.mark.parametrize("run", sorted(MEASURED))
def test_the_search_tries_the_runs_own_policy_and_the_memory_model_keeps_it(run):
    # MaxText's remat and offload for the run are among the settings the search compiles
    from harness.plan.search import prune
    from workloads import tpu
    from workloads.llama import fit
    from workloads.mesh import abstract_mesh

    argv, cfg = _config(run)
    shape = {k: v for k, v in (a.split("=", 1) for a in argv[argv.index("--set") + 1::2])
             if k in SHAPE_SETS}
    mesh = abstract_mesh(argv[argv.index("--mesh") + 1], ("X", "Y"))
    hbm = hardware.chip_entry(PREDICTED[run]["chip"]).hbm_bytes
    preset = argv[argv.index("--preset") + 1]
    trials = fit.trials(workloads.make_config("llama_train", preset, shape), mesh, hbm, shape)
    own = ", ".join(f"{k}={getattr(cfg, k)}" for k in ("remat", "remat_offload")
                    if k == "remat" or cfg.remat == "custom")
    kept, _ = prune("llama_train", trials, hbm, tpu.TOPOLOGIES[PREDICTED[run]["chip"]].host_bytes)
    assert own in [t.policy for t in kept]


@pytest.mark.heavy  # the search's compiles at real size, 3 to 10 min each on a 2-core host
@pytest.mark.libtpu
@pytest.mark.parametrize("run", sorted(MEASURED))
def test_from_its_shape_alone_the_search_finds_a_fit_that_stays_a_bound(run, capsys,
                                                                        monkeypatch):
    if run in LIBTPU_FLAGS:
        monkeypatch.setenv("LIBTPU_INIT_ARGS", LIBTPU_FLAGS[run])
    assert main([*_shape_argv(run), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("(no remat given): the first setting that fits" in n for n in out["notes"])
    chip = out["chips"][0]
    assert chip["compile"] != "cpu" and chip["memory_fit"]["fits"]
    assert chip["totals"]["predicted_step_s"] <= float(MEASURED[run]["step s"])
