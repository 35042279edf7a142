"""The cheapest way to fit (issue 56 part 3): every setting of ``predict-hlo``'s fit search
ranked by predicted step time (``harness.plan.search.table``), the ones the memory model prunes
named, and LLaMA-3 70B on a v5p 16x16 slice at MaxText's v5p shape (4 sequences of 4096 tokens
a chip, FSDP: ``MaxText/configs/v5p/llama2_70b.sh``, 4M tokens on v5p-512's 256 chips) ranked
from its shape alone, with the compile skipped (``--compile 0``); marked ``heavy``, the search
compiling the best two. Beside the remat and offload policies the ranking holds the ZeRO stages
(at the dp layout), gradient accumulation over microbatches and a smaller batch, each checked
here from the arithmetic of `training.md` (reference §6.1, §6.3)."""
import json

import pytest

import workloads
from harness.cli import main
from harness.plan import search
from workloads import aot
from workloads.base import FitCollective, FitTrial
from workloads.llama import fit, memory
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


def test_collectives_over_ici_and_a_smaller_batchs_steps_in_the_predicted_time():
    # sharding.md: an all-gather of V on a wrapped 16x16 takes V / (2 axes x 2 x W1); a v5p's
    # W1 = 90 GB/s: 180 GB in 0.5 s, 4 of them 2 s; an all-reduce 2x. Under 4.59e14 FLOPs
    # (1 s) the collectives set the step; 2 steps of a smaller batch, 4 s
    gathers = (FitCollective("all-gather", 180e9, (16, 16), 4),)
    a = FitTrial({}, "zero-3", "a", 10e9, flops=4.59e14, collectives=gathers)
    assert search.ici_s(a, "tpu-v5p") == pytest.approx(2.0)
    assert search.predicted_s(a, "tpu-v5p") == pytest.approx(2.0)
    b = FitTrial({}, "smaller batch", "b", 10e9, flops=4.59e14, steps=2.0,
                 collectives=(FitCollective("all-reduce", 180e9, (16, 16)),))
    assert search.predicted_s(b, "tpu-v5p") == pytest.approx(2 * 1.0)  # 2 x max(1 s, 1 s)
    assert search.ici_bytes(a) == 720e9 and search.ici_bytes(b) == 360e9  # all-reduce: 2V
    t = search.table([a, b], "tpu-v5p", HBM, HOST)
    assert list(t[search.ADDED]) == [0.0, 4.59e14]    # b's 2 steps: 9.18e14 FLOPs
    assert t[search.STAGE][0] == "zero-3"      # a tie (2 s) goes to the batch asked for


def test_the_settings_the_model_prunes_are_named_with_why():
    t = _table()
    past = dict(zip(t[search.SETTING], t[search.MODEL]))
    kept = {s for s, m in past.items() if m == "fits"}
    # the 14 policies, 2 microbatch counts (B/M over the 256 chips: M = 2, 4), 1 smaller batch
    assert sum(m == "fits" for m in past.values()) == 11 and len(past) == 17
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
    row = llama2[llama2[search.SETTING].str.endswith("remat=save_dot_except_mlpwi")
                 & (llama2[search.STAGE] == "remat")].iloc[0]
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
    placed = [r for r in out["fit_settings"] if r["libtpu"] == "placed"]
    assert len(placed) == 2 and all(r["simulated_s"] > 0 for r in placed)
    # kept: the one whose compiled schedule simulates shortest
    kept = min(placed, key=lambda r: r["simulated_s"])
    assert kept["setting"] in out["notes"][-1]
    assert "by its compiled schedule's simulated step" in out["notes"][-1]


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
    # a stand-in libtpu that refuses the model's cheapest setting (4 microbatches, every
    # projection output and the attention residuals kept: 15.5 s, no recomputation) and places
    # every other: with K = 2 the search compiles the first three ranked it may build; the
    # smaller batch tied with the first (the same FLOPs for the same tokens, ranked after the
    # batch asked for) is never compiled (a different batch)
    tried = []

    def fake(name, preset, overrides, mesh, tpu_chip=None, cache_dir=None):
        tried.append(overrides.get("remat_offload", overrides["remat"]))
        return _Job(overrides.get("microbatches") == "4")

    monkeypatch.setattr(aot, "start_compile", fake)
    found = search.search(TRAIN, "70b", SHAPE, "16x16", "tpu-v5p", None, compiles=2)
    first4 = list(found.table[search.SETTING][:4])
    assert tried == ["minimal_with_context", "save_dot_except_mlpwi", "context,mlpwo"]
    assert list(found.table[search.LIBTPU][:5]) == ["refused", "modelled only", "placed", "placed",
                                                  ""]
    assert list(found.table[search.STAGE][:4]) == ["microbatch", "smaller batch", "microbatch",
                                                 "offload"]
    # the cheaper placed: 2 microbatches keeping all but the MLP's input projections (18.3 s)
    # before the offload of the context and mlpwo (19.0 s)
    assert found.sets["microbatches"] == "2" and found.sets["remat"] == "save_dot_except_mlpwi"
    assert first4[2] == "num_vocab_tiling=1, microbatches=2, remat=save_dot_except_mlpwi"
    assert "the cheapest of the 2 settings placed in tpu-v5p's HBM" in found.note
    assert "3 compiles in" in found.note and "microbatches=4" in found.note


def _dot(n: int) -> str:
    """A compiled step of one bf16 [n, n] x [n, n] matmul: 2n^3 FLOPs at the chip's peak."""
    shape = f"bf16[{n},{n}]"
    return (f"HloModule step, is_scheduled=true\n\n"
            f"ENTRY %e (p0: {shape}, p1: {shape}) -> {shape} {{\n"
            f"  %p0 = {shape}{{1,0}} parameter(0)\n  %p1 = {shape}{{1,0}} parameter(1)\n"
            f"  ROOT %d = {shape}{{1,0}} dot(%p0, %p1), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n}}\n")


class _Placed:
    def __init__(self, hlo_text: str):
        self.hlo_text = hlo_text

    def result(self):
        return self


def test_of_the_placed_the_shortest_simulated_schedule_is_kept(monkeypatch):
    """The stand-in libtpu of the test above, now returning each placed setting's program: the
    model's first placed (2 microbatches, 18.3 s) a step of one 8192-wide matmul, the offload
    after it (19.0 s) one of 1024: their schedules at a v5p's roofline, 2n^3 / 459 TFLOP/s,
    are 2.40 ms and 4.68 us, so the offload is kept though the model ranks it second."""
    from predictions import hardware

    peak = hardware.chip_entry("tpu-v5p").flops_per_s("bf16")

    def fake(name, preset, overrides, mesh, tpu_chip=None, cache_dir=None):
        if overrides.get("microbatches") == "4":
            return _Job(True)
        return _Placed(_dot(8192 if overrides.get("microbatches") == "2" else 1024))

    monkeypatch.setattr(aot, "start_compile", fake)
    found = search.search(TRAIN, "70b", SHAPE, "16x16", "tpu-v5p", None, compiles=2)
    assert found.sets["remat_offload"] == "context,mlpwo" and "microbatches" not in found.sets
    placed = found.table[found.table[search.LIBTPU] == "placed"]
    assert sorted(placed[search.SIMULATED_S]) == pytest.approx(
        [2 * 1024**3 / peak, 2 * 8192**3 / peak], rel=1e-9)
    assert found.table[found.table[search.LIBTPU] != "placed"][search.SIMULATED_S].isna().all()
    assert "the cheapest of the 2 settings placed in tpu-v5p's HBM, by its compiled " \
           "schedule's simulated step (4.68 us against 2.4 ms)" in found.note


# --- beyond remat: ZeRO, microbatches, a smaller batch (training.md, reference §6.1, §6.3) ---
P70 = L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * V   # 70.55e9 parameters
DP = {**SHAPE, "parallelism": "dp"}


def _rows(shape=SHAPE) -> dict:
    """stage -> [its FitTrials] of the search at ``shape``."""
    cfg = workloads.make_config("llama_train", "70b", shape)
    out = {}
    for t in TRAIN.fit_trials(cfg, MESH, HBM, shape):
        out.setdefault(t.stage, []).append(t)
    return out


def _bytes(shape, sets) -> dict:
    return memory.train_bytes(workloads.make_config("llama_train", "70b", shape | sets), MESH)


def test_zero_1_and_2_shard_the_moments_and_gradients_over_dps_256_chips():
    assert P70 == pytest.approx(70.55e9, rel=1e-4)
    rows = _rows(DP)
    (one,), (two,) = rows["zero-1"], rows["zero-2"]
    # fp32 AdamW moments, 2 x 4 B a parameter, over the 256 data devices: 2.20 GB a chip
    # (dp keeps all 564 GB on each)
    assert one.sets["zero1"] == "true" and 8 * P70 / 256 == pytest.approx(2.205e9, rel=1e-3)
    assert _bytes(DP, one.sets)["optimizer"] == pytest.approx(8 * P70 / 256, rel=1e-9)
    assert _bytes(DP, {})["optimizer"] == pytest.approx(8 * P70, rel=1e-9)
    # ZeRO-2 shards the bf16 gradients too: 141.1 GB less 1/256 of it below ZeRO-1
    assert one.need_bytes - two.need_bytes == pytest.approx(2 * P70 * 255 / 256, rel=1e-9)
    # both keep dp's traffic (training.md: the same communication cost): the gradients
    # reduce-scattered and the updated weights gathered, 2 x 141.1 GB, as dp's all-reduce
    dp = rows["remat"][0]
    assert [(c.kind, c.count) for c in dp.collectives] == [("all-reduce", 1)]
    assert search.ici_bytes(one) == search.ici_bytes(dp) == pytest.approx(2 * 2 * P70)
    t = search.table([*rows["remat"], one, two], "tpu-v5p", HBM, HOST)
    libtpu = dict(zip(t[search.STAGE], t[search.LIBTPU]))
    assert libtpu["zero-2"] == "modelled only" and libtpu["zero-1"] == ""   # zero1: a knob
    # 141 GB of bf16 weights replicated: no dp setting fits 96 GB, ZeRO-1 and 2 neither
    assert set(t[search.MODEL]) == {"past HBM"}


def test_zero_3_is_fsdp_gathering_the_weights_twice_and_fits_where_dp_cannot():
    (three,) = _rows(DP)["zero-3"]
    assert three.sets["parallelism"] == "fsdp" and three.compilable
    # training.md: FSDP all-gathers the bf16 weights in the forward and again in the backward
    # and reduce-scatters the gradients: 3 x 141.1 GB a step to dp's all-reduce 2x
    gathered = sum(c.nbytes * c.count for c in three.collectives if c.kind == "all-gather")
    assert gathered == pytest.approx(2 * 2 * P70, rel=1e-9)
    assert search.ici_bytes(three) == pytest.approx(3 * 2 * P70, rel=1e-9)
    # on a v5p's wrapped 16x16 (sharding.md: V / (2 axes x 2 x 90 GB/s)), 0.392 s each,
    # 1.18 s in all: under the step's FLOPs, which set its time
    assert search.ici_s(three, "tpu-v5p") == pytest.approx(3 * 2 * P70 / (2 * 2 * 90e9))
    assert search.predicted_s(three, "tpu-v5p") == pytest.approx(three.flops / 459e12)
    t = search.table(TRAIN.fit_trials(workloads.make_config("llama_train", "70b", DP), MESH,
                                      HBM, DP), "tpu-v5p", HBM, HOST)
    assert t[search.STAGE][0] == "zero-3" and t[search.RANK][0] == 1 and t[search.RANK][
        1:].isna().all()


def test_four_microbatches_keep_a_quarter_of_the_activations_and_gather_4x():
    micro = {t.sets["microbatches"]: t for t in _rows()["microbatch"]}
    assert sorted(micro) == ["2", "4"] and (m4 := micro["4"])   # B/M = 512, 256 on 256 chips
    # full remat keeps the layer input: 80 layers x 16384 / 4 tokens x 8192 x 2 B = 5.37 GB
    full = {"remat": "full", "microbatches": "4"}
    assert _bytes(SHAPE, full)["activations"] == pytest.approx(L * TOKENS / 4 * D * 2)
    one = {k: v for k, v in m4.sets.items() if k != "microbatches"}
    assert _bytes(SHAPE, m4.sets)["activations"] == pytest.approx(
        _bytes(SHAPE, one)["activations"] / 4, rel=1e-12)
    # one microbatch's bf16 gradients beside their fp32 sums: 6 B a parameter over 256 chips
    assert _bytes(SHAPE, m4.sets)["gradients"] == pytest.approx(6 * P70 / 256, rel=1e-9)
    # the same FLOPs as the whole batch at once; each microbatch gathers the weights twice
    # and reduce-scatters its gradients: 4 x 3 x 141.1 GB
    assert m4.flops == pytest.approx(_flops({**SHAPE, **one}), rel=1e-12)
    assert search.ici_bytes(m4) == pytest.approx(4 * 3 * 2 * P70, rel=1e-9)


def _flops(shape) -> float:
    return fit.step_flops(workloads.make_config("llama_train", "70b", shape), MESH)


def test_a_smaller_batch_is_priced_per_token_and_never_compiled():
    (row,) = _rows()["smaller batch"]
    # no remat fits at B = 1024 (409.6 GiB), 512 or 256 (~102 GiB at a sequence a chip);
    # keeping every projection output and the attention residuals, 256
    # fits (the model's bytes at 512 are past 96 GB): 4 steps of B = 256 carry the batch
    assert row.sets["B"] == "256" and row.sets["remat"] == "minimal_with_context"
    assert row.steps == 4 and not row.compilable and "changes the optimisation" in row.note
    assert memory.total(_bytes(SHAPE, {"B": "512", "remat": "minimal_with_context",
                                       "num_vocab_tiling": "4096"})) > HBM
    # its 4 steps do the whole batch's FLOPs, nothing recomputed: 6 x matmul parameters x a
    # chip's 16384 tokens + causal attention (6·T·N·H·L a token), at 459 TFLOP/s: 15.46 s,
    # 3.69 us for each of the batch's 4.19M tokens
    matmul = L * (3 * D * F + 2 * D * (N + K) * H) + D * V
    flops = 6 * matmul * TOKENS + 6 * 4096 * N * H * L * TOKENS
    assert search.predicted_s(row, "tpu-v5p") == pytest.approx(flops / 459e12, rel=1e-9)
    assert search.predicted_s(row, "tpu-v5p") / (1024 * 4096) == pytest.approx(3.69e-6, rel=1e-2)
