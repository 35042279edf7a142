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


def _kept(run: str) -> list:
    """The settings the search keeps for a run's shape, in the workload's order."""
    from harness.plan.search import prune
    from workloads import tpu
    from workloads.llama import fit
    from workloads.mesh import abstract_mesh

    argv = _shape_argv(run)
    shape = dict(a.split("=", 1) for a in argv[argv.index("--set") + 1::2])
    mesh = abstract_mesh(argv[argv.index("--mesh") + 1], ("X", "Y"))
    chip = PREDICTED[run]["chip"]
    hbm = hardware.chip_entry(chip).hbm_bytes
    cfg = workloads.make_config("llama_train", argv[argv.index("--preset") + 1], shape)
    kept, _ = prune("llama_train", fit.trials(cfg, mesh, hbm, shape), hbm,
                    tpu.TOPOLOGIES[chip].host_bytes)
    return kept


# The book's chips (tpus.md): bf16 FLOP/s, PCIe bytes/s each way and ICI bytes/s a link both
# ways, per chip
BOOK_CHIP = {"tpu-v6e": (920e12, 32e9, 1.8e11), "tpu-v5p": (459e12, 16e9, 1.8e11)}
ALL_NAMES = ("query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo",
             "context")


def _parts(run: str, sets: dict) -> tuple[float, float, float, float]:
    """``(steps, T_math, T_host, T_ici)`` of a setting from the book alone, a step each: T_math,
    a chip's 6 · matmul parameters · tokens + causal attention (6·T·N·H·L a token), the forward
    of every name the policy neither keeps nor offloads once more in each layer, and 2·D·V a
    token for a chunked loss; T_host, the offloaded widths' bf16 bytes, to host and back;
    T_ici, FSDP's weights (P bf16 parameters, P = L(3DF + 2D(N+K)H + 2D) + D + 2DV) gathered
    twice and their gradients reduce-scattered once a microbatch (`training.md`), each V/W_bidi
    over each of the mesh's two axes at once (`sharding.md`). A smaller batch B' (``B`` set)
    takes B/B' steps of B'/chips sequences a chip."""
    from workloads.llama import remat

    _, cfg = _config(run)
    L, D, F, N, K, H, V, T = (cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V, cfg.T)
    chips = cfg.B // int(MEASURED[run]["batch/device"])
    B = int(sets.get("B", cfg.B))
    tokens = B // chips * T
    forward = {"query_proj": 2 * D * N * H, "key_proj": 2 * D * K * H,
               "value_proj": 2 * D * K * H, "out_proj": 2 * N * H * D, "mlpwi_0": 2 * D * F,
               "mlpwi_1": 2 * D * F, "mlpwo": 2 * F * D, "context": 2 * T * N * H}
    width = {"query_proj": N * H, "key_proj": K * H, "value_proj": K * H, "out_proj": D,
             "mlpwi_0": F, "mlpwi_1": F, "mlpwo": D, "context": N * H,
             "decoder_layer_input": D}
    pol = remat.policy(sets["remat"], "", sets.get("remat_offload", ""))
    again = [] if not pol.checkpoint else [n for n in ALL_NAMES
                                           if n not in pol.saved + pol.offloaded]
    flops = (6 * (L * (3 * D * F + 2 * D * (N + K) * H) + D * V) * tokens
             + 6 * T * N * H * L * tokens + L * tokens * sum(forward[n] for n in again)
             + (2 * D * V * tokens if int(sets["num_vocab_tiling"]) > 1 else 0))
    host = 2 * tokens * L * sum(width[n] for n in pol.offloaded)
    peak, pcie, ici = BOOK_CHIP[PREDICTED[run]["chip"]]
    weights = 2 * (L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * V)
    gathers = 3 * int(sets.get("microbatches", 1)) * weights
    return cfg.B / B, flops / peak, 2 * host / pcie, gathers / (2 * ici)


def _seconds(run: str, sets: dict) -> float:
    """The time a setting is predicted at, from the book alone: steps x max(T_math, T_host,
    T_ici) (roofline.md, the host transfers and collectives overlapping the compute)."""
    steps, *times = _parts(run, sets)
    return steps * max(times)


@pytest.mark.parametrize("run", sorted(MEASURED))
def test_the_search_compiles_the_kept_settings_cheapest_first_by_predicted_step(run):
    from harness.plan.search import ordered, predicted_s

    kept, chip = _kept(run), PREDICTED[run]["chip"]
    for t in kept:
        assert predicted_s(t, chip) == pytest.approx(_seconds(run, t.sets), rel=1e-9)
    book = sorted(kept, key=lambda t: (_seconds(run, t.sets), t.need_bytes))
    assert ordered(kept, chip) == book
    assert ordered(kept, chip)[0].policy == FIRST_POLICY[run]


# The first of the remat and offload policies (``fit.trials``) for each run's shape, and why:
# every kept policy's offloads cross PCIe in less time than its FLOPs take, so it is the one
# that recomputes least (with the fewest loss chunks). The whole ranking (``fit_more``: the
# microbatches and a smaller batch beside them) puts a microbatched setting before it for 8B and
# LLaMA-2 70B (test_predict_hlos_ranking_from_the_shape_is_the_pages).
FIRST_POLICY = {
    # 8B and LLaMA-2 70B: the policies that recompute only the attention (minimal, dots) or
    # less are past 32 GB; MaxText's 405B offload, context and mlpwo to the host, recomputes
    # Q, K, V, out_proj and the MLP's input projections, less than any other kept
    "llama3.1-8b-v6e": "remat=custom, remat_offload=context,mlpwo",
    "llama2-70b-v6e": "remat=custom, remat_offload=context,mlpwo",
    # only the offloads of the layer input are kept; Q, K, V offloaded recompute least
    "llama3.1-70b-v6e": "remat=custom, remat_offload=decoder_layer_input,query_proj,key_proj,"
                        "value_proj",
    "llama3.1-405b-v5p": "remat=custom, remat_offload=context,mlpwo",
}


SHAPES = _table("From the shapes alone")
FIRST = "first in the ranking (model: HBM, host; predicted)"


def _ranking(run: str) -> tuple:
    """``(config values, ranking)`` of ``predict-hlo`` on a run's shape with ``--compile 0``:
    ``harness.plan.search.search`` as ``predict_workload`` calls it, nothing compiled."""
    from harness.plan.search import search

    argv = _shape_argv(run)
    shape = dict(a.split("=", 1) for a in argv[argv.index("--set") + 1::2])
    fit = search(workloads.get("llama_train"), argv[argv.index("--preset") + 1], shape,
                 argv[argv.index("--mesh") + 1], PREDICTED[run]["chip"], None, compiles=0)
    return fit.sets, fit.table


@pytest.mark.parametrize("run", sorted(MEASURED))
def test_predict_hlos_ranking_from_the_shape_is_the_pages(run):
    # the page's "From the shapes alone" row is the ranking predict-hlo prints (its first row,
    # the setting the search compiles first, and the settings pruned), and the ranking's order
    # of the kept settings is the book's: steps x max(T_math, T_host, T_ici) (``_parts``), every
    # T_ici under T_math (FSDP's weight traffic, microbatched or not, hides under the FLOPs),
    # a tie to the batch asked for (fewer steps), then to the fewer HBM bytes
    from harness.plan import search as s

    sets, table = _ranking(run)
    page = SHAPES[run]
    first = re.fullmatch(r"`([^`]*)` \(([\d.]+) GB, (?:([\d.]+) GB host|none to host); "
                         r"([\d.]+) s\)", page[FIRST]).groups()
    kept = table[table[s.RANK].notna()]
    top = kept.iloc[0]
    assert top[s.SETTING] == first[0] and sets == {**_shape_sets(run), **_setting(first[0]),
                                                   "donate_state": "true"}
    assert top[s.HBM] / 1e9 == pytest.approx(float(first[1]), abs=0.05)
    assert top[s.HOST] / 1e9 == pytest.approx(float(first[2] or 0), abs=0.05)
    assert top[s.PREDICTED_S] == pytest.approx(float(first[3]), abs=0.005)
    hbm, host = (int((table[s.MODEL] == v).sum()) for v in (s.PAST_HBM, s.PAST_HOST))
    budget = hardware.chip_entry(PREDICTED[run]["chip"]).hbm_bytes / 1e9
    said = f"{hbm} of {len(table)} past {budget:.0f} GB"
    said += (f", {host} past the 128 GiB of host memory libtpu gives a "
             f"{PREDICTED[run]['chip'][4:]} chip" if host else "")
    assert page["pruned before compiling"] == said
    rows = [(_setting(r[s.SETTING]), r) for _, r in kept.iterrows()]
    for setting, r in rows:
        steps, math_s, _, ici_s = _parts(run, setting)
        assert ici_s < math_s
        assert r[s.PREDICTED_S] == pytest.approx(_seconds(run, setting), rel=1e-9)
    book = sorted(rows, key=lambda x: (round(_seconds(run, x[0]), 9), _parts(run, x[0])[0],
                                       x[1][s.HBM]))
    assert [r[s.SETTING] for _, r in book] == list(kept[s.SETTING])


def _shape_sets(run: str) -> dict:
    argv = _shape_argv(run)
    return dict(a.split("=", 1) for a in argv[argv.index("--set") + 1::2])


def _setting(words: str) -> dict:
    """``"num_vocab_tiling=2, remat=custom, remat_offload=context,mlpwo"`` as config values."""
    return dict(kv.split("=", 1) for kv in words.split(", "))


def test_the_405b_search_compiles_maxtexts_offload_before_full_remat():
    # Both keep the loss in 4 chunks. Full remat recomputes besides the MLP's output projection
    # (2·F·D a token) and the causal attention (2·T·N·H): 126 layers x 16384 tokens a chip x
    # (1.745e9 + 0.268e9) = 4.16e15 FLOPs, 9.05 s at 459 TFLOP/s; the offload's 126 x 16384 x
    # (N·H + D) x 2 B = 135.3 GB go to host and back in 16.9 s at 16 GB/s, under its ~111 s
    from harness.plan.search import ordered, predicted_s

    D, F, N, H, T = 16384, 53248, 128, 128, 8192
    extra = 126 * 16384 * (2 * F * D + 2 * T * N * H)
    assert extra / 459e12 == pytest.approx(9.05, abs=0.01)
    host = 126 * 16384 * (N * H + D) * 2
    assert host == pytest.approx(135.3e9, rel=1e-3) and 2 * host / 16e9 == pytest.approx(16.9,
                                                                                         abs=0.05)
    kept = {t.policy: t for t in _kept("llama3.1-405b-v5p")}
    offload, full = kept["remat=custom, remat_offload=context,mlpwo"], kept["remat=full"]
    assert offload.sets["num_vocab_tiling"] == full.sets["num_vocab_tiling"] == "4"
    assert predicted_s(full, "tpu-v5p") - predicted_s(offload, "tpu-v5p") == pytest.approx(
        extra / 459e12, rel=1e-9)
    order = ordered(list(kept.values()), "tpu-v5p")
    assert order.index(offload) < order.index(full)
    # 135.3 GB is within the 128 GiB (137.4 GB) of host memory libtpu gives a v5p chip; every
    # projection output offloaded (minimal_offloaded, the attention alone recomputed) would be
    # 126 x 16384 x (N·H + 2K·H + 2D + 2F) x 2 B = 651 GB, past it (libtpu refused its
    # 219.8 GB bf16[126,2,8192,53248] of one MLP input projection alone) and pruned
    assert host <= 128 * 2**30
    assert 126 * 16384 * (N * H + 2 * 8 * H + 2 * D + 2 * F) * 2 == pytest.approx(651.1e9,
                                                                                  rel=1e-3)
    assert "remat=minimal_offloaded" not in kept


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
