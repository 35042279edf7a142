"""The cheapest way to fit (issue 56 part 3): every setting of ``predict-hlo``'s fit search
ranked by predicted step time (``harness.plan.search.table``), the ones the memory model prunes
named, and LLaMA-3 70B on a v5p 16x16 slice at MaxText's v5p shape (4 sequences of 4096 tokens
a chip, FSDP: ``MaxText/configs/v5p/llama2_70b.sh``, 4M tokens on v5p-512's 256 chips) ranked
from its shape alone, with the compile skipped (``--compile 0``); marked ``heavy``, the search
compiling the best two."""
import json

import pytest

import workloads
from harness.cli import main
from harness.plan import search
from workloads import aot
from workloads.base import FitTrial
from workloads.mesh import abstract_mesh

TRAIN = workloads.get("llama_train")
SHAPE = {"B": "1024", "T": "4096", "parallelism": "fsdp"}      # 4 x 4096 tokens a chip
MESH = abstract_mesh("16x16", TRAIN.mesh_axes)
L, D, F, N, K, H, V = 80, 8192, 28672, 64, 8, 128, 128256
TOKENS = 4 * 4096                                               # a chip's tokens
HBM = 96e9                                                      # a v5p's, the book's figure
HOST = 128 * 2**30                                              # what libtpu gives a v5p chip
OFFLOAD_ALL = "decoder_layer_input,query_proj,key_proj,value_proj,out_proj"


def _state(vocab: int) -> float:
    """Parameters (transformers.md: L(3DF + 2D(N+K)H + 2D) + D + 2DV), bf16 weights and
    gradients and fp32 AdamW moments, 12 bytes each, over the 256 chips."""
    return (L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * vocab) * 12 / 256


LAYER = TOKENS * (2 * F + (N + 2 * K) * H + 2 * D) * 2          # one layer's transients, bf16


def _table(shape=SHAPE):
    cfg = workloads.make_config("llama_train", "70b", shape)
    trials = TRAIN.fit_trials(cfg, MESH, HBM, shape)
    return search.table(trials, "tpu-v5p", HBM, HOST)


def test_the_ranking_is_the_step_time_from_arithmetic_kept_settings_first():
    # roofline.md: max(T_math, T_comms); a v6e: 920 TFLOP/s bf16, PCIe 32 GB/s each way.
    # a: 9.2e15 FLOPs = 10 s, nothing offloaded; b: 4.6e15 = 5 s of FLOPs under 2 x 128 GB
    # to host and back = 8 s: b first, 2 s cheaper; c the fastest (4 s) but past 32 GB of HBM;
    # d past the host memory
    a = FitTrial({"remat": "full"}, "remat", "a", 20e9, flops=9.2e15)
    b = FitTrial({"remat": "offload"}, "offload", "b", 10e9, host_bytes=128e9, flops=4.6e15)
    c = FitTrial({"remat": "none"}, "remat", "c", 40e9, flops=3.68e15)
    d = FitTrial({"remat": "all"}, "offload", "d", 5e9, host_bytes=200e9, flops=3.68e15)
    t = search.table([a, b, c, d], "tpu-v6e", 32e9, 150e9, {"remat=offload": search.PLACED})
    assert list(t[search.SETTING]) == ["remat=offload", "remat=full", "remat=none", "remat=all"]
    assert list(t[search.PREDICTED_S]) == pytest.approx([8.0, 10.0, 4.0, 12.5])  # d: 400/32
    assert list(t[search.RANK][:2]) == [1, 2] and t[search.RANK][2:].isna().all()
    assert list(t[search.MODEL]) == ["fits", "fits", "past HBM", "past host memory"]
    assert list(t[search.LIBTPU]) == ["placed", "", "", ""]
    # FLOPs beyond the fewest (3.68e15): b 0.92e15, a 5.52e15
    assert list(t[search.ADDED]) == pytest.approx([0.92e15, 5.52e15, 0.0, 0.0])
    assert list(t[search.HBM]) == [10e9, 20e9, 40e9, 5e9]


def test_the_settings_the_model_prunes_are_named_with_why():
    t = _table()
    past = dict(zip(t[search.SETTING], t[search.MODEL]))
    kept = {s for s, m in past.items() if m == "fits"}
    assert sum(m == "fits" for m in past.values()) == 8 and len(past) == 14
    # save_dot_except_mlpwi keeps a layer's input, Q, K, V, out_proj and mlpwo: 80 layers x
    # 16384 tokens x (D + (N + 2K)H + 2D) x 2 B = 91.3 GB, with the state and one layer's
    # transients 97.3 GB, past 96 GB whatever the loss chunks
    saved = L * TOKENS * (3 * D + (N + 2 * K) * H) * 2
    assert saved == pytest.approx(91.27e9, rel=1e-3)
    assert saved + _state(V) + LAYER == pytest.approx(97.3e9, rel=1e-3) and saved + _state(V) \
        + LAYER > HBM
    for policy in ("none", "minimal_with_context", "dots", "minimal", "save_dot_except_mlpwi"):
        assert past[f"num_vocab_tiling=4096, remat={policy}"] == "past HBM"
    # every projection output offloaded: 80 x 16384 x (N·H + 2K·H + 2D + 2F) x 2 B = 220 GB,
    # past the 137.4 GB libtpu gives a v5p chip's host
    host = L * TOKENS * (N * H + 2 * K * H + 2 * D + 2 * F) * 2
    assert host == pytest.approx(220.1e9, rel=1e-3) and host > HOST
    assert past["num_vocab_tiling=1, remat=minimal_offloaded"] == "past host memory"
    assert "num_vocab_tiling=1, remat=full" in kept


def test_maxtexts_70b_settings_fit_by_the_model_but_its_v5p_one_only_in_libtpus_gib():
    t = _table()
    fits = set(t[search.SETTING][t[search.MODEL] == "fits"])
    # MaxText's published 70B runs (docs/published-runs.md: llama2-70b-v6e, llama3.1-70b-v6e)
    # offload Q, K, V, or the layer input with them: both fit a v5p chip at this shape (the
    # layer input offloaded, HBM holds the state, one layer's transients and the logits)
    assert "num_vocab_tiling=1, remat=qkv_proj_offloaded" in fits
    assert ("num_vocab_tiling=1, remat=custom, remat_offload=decoder_layer_input,query_proj,"
            "key_proj,value_proj") in fits
    # MaxText's v5p config for the 70B architecture (LLaMA-2's 32000 words), remat
    # save_dot_except_mlpwi: 97.25 GB by the arithmetic above, past the book's 96 GB (so the
    # model prunes it) yet within the 95.74 GiB = 102.8 GB libtpu counts usable on a v5p
    llama2 = _table({**SHAPE, "V": "32000"})
    row = llama2[llama2[search.SETTING].str.endswith("remat=save_dot_except_mlpwi")].iloc[0]
    at_least = L * TOKENS * (3 * D + (N + 2 * K) * H) * 2 + _state(32000) + LAYER
    assert at_least == pytest.approx(97.25e9, rel=1e-3)
    assert row[search.MODEL] == "past HBM" and at_least <= row[search.HBM] <= 95.74 * 2**30


@pytest.mark.libtpu
def test_predict_hlo_compile_0_prints_the_ranking_alone(capsys):
    argv = ["predict-hlo", "llama_train", "--preset", "70b", "--chip", "tpu-v5p", "--mesh",
            "16x16", "--set", "parallelism=fsdp", "--set", "B=1024", "--compile", "0"]
    assert main([*argv, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chips"] == [] and out["compiles"] == {}
    rows = out["fit_settings"]
    assert [r["rank"] for r in rows[:8]] == list(range(1, 9))
    assert [r["predicted_s"] for r in rows[:8]] == sorted(r["predicted_s"] for r in rows[:8])
    assert "nothing compiled (--compile 0)" in out["notes"][-1]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "the settings the fit search weighed" in text and "past host memory" in text


def test_compile_0_with_a_remat_given_is_a_one_line_error(capsys):
    argv = ["predict-hlo", "llama_train", "--preset", "tiny", "--mesh", "2x4", "--chip",
            "tpu-v5p", "--compiler", "cpu", "--set", "remat=full", "--compile", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--compile 0 ranks the fit search's settings" in err and "Traceback" not in err


@pytest.mark.heavy   # two real-size compiles for v5p:8x8x4, minutes each
@pytest.mark.libtpu
def test_the_search_compiles_the_best_two_and_keeps_the_cheaper(capsys):
    argv = ["predict-hlo", "llama_train", "--preset", "70b", "--chip", "tpu-v5p", "--mesh",
            "16x16", "--compiler", "tpu", "--set", "parallelism=fsdp", "--set", "B=1024",
            "--compile", "2", "--format", "json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    verdicts = [r["libtpu"] for r in out["fit_settings"]]
    assert verdicts.count("placed") == 2
    first = next(r for r in out["fit_settings"] if r["libtpu"] == "placed")
    assert out["notes"][-1].startswith(first["setting"]) or first["setting"] in out["notes"][-1]


class _Job:
    def __init__(self, refuse: bool):
        self.refuse = refuse

    def result(self):
        if self.refuse:  # 40 GiB over: no loss chunking saves that much, so no retry
            raise aot.HbmExhausted(
                "XLA:TPU for v5p:8x8x4: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
                "memory required for HLO temporaries (135.74G) exceeds available HBM (95.74G).")
        return "compiled"


def test_compile_k_places_k_and_keeps_the_cheapest_placed(monkeypatch):
    # a stand-in libtpu that refuses the model's cheapest setting (context and mlpwo offloaded,
    # 19.0 s) and places every other: with K = 2 the search compiles the first three ranked
    tried = []

    def fake(name, preset, overrides, mesh, tpu_chip=None, cache_dir=None):
        tried.append(overrides.get("remat_offload", overrides["remat"]))
        return _Job(overrides.get("remat_offload") == "context,mlpwo")

    monkeypatch.setattr(aot, "start_compile", fake)
    fit = search.search(TRAIN, "70b", SHAPE, "16x16", "tpu-v5p", None, compiles=2)
    first3 = list(fit.table[search.SETTING][:3])
    assert tried == ["context,mlpwo", OFFLOAD_ALL, "save_dot_except_mlp"]
    assert list(fit.table[search.LIBTPU][:4]) == ["refused", "placed", "placed", ""]
    # both placed predict 19.7 s (the tie goes to the fewer HBM bytes: the offload's 22.9 GB)
    assert fit.sets["remat_offload"] == OFFLOAD_ALL and first3[1].endswith(OFFLOAD_ALL)
    assert "the cheapest of the 2 settings placed in tpu-v5p's HBM" in fit.note
    assert "3 compiles in" in fit.note and "remat_offload=context,mlpwo" in fit.note
