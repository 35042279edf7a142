"""``predict-hlo`` with no remat given searches the memory knobs (``harness.plan.search``): the
memory model's bytes for the loss in chunks and the policies (``workloads.llama.fit``), checked
by arithmetic on LLaMA-3.1 70B at MaxText's published shape (5 x 8192 tokens a v6e chip); the
order, pruning, retries and compile count on a stand-in compiler; and, marked ``slow``, through
libtpu on a config whose activations overflow a v5e's 16 GB."""
import pytest

import workloads
from harness.plan import search
from workloads import aot
from workloads.base import FitTrial
from workloads.llama import fit, memory, remat
from workloads.mesh import abstract_mesh

TRAIN = workloads.get("llama_train")
# llama3_1_70b_8192: 5 sequences of 8192 tokens on each of 256 v6e chips, FSDP
SHAPE = {"B": "1280", "T": "8192", "parallelism": "fsdp"}
MESH = abstract_mesh("16x16", TRAIN.mesh_axes)
CFG = workloads.make_config("llama_train", "70b", SHAPE)
L, D, F, N, K, H, V = 80, 8192, 28672, 64, 8, 128, 128256
TOKENS = 5 * 8192                                   # a chip's tokens
# parameters (transformers.md): L(3DF + 2D(N+K)H + 2D) + D + 2DV; bf16 weights and gradients,
# fp32 AdamW moments, all split over the 256 chips
STATE = (L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * V) * (2 + 2 + 8) / 256
LAYER = TOKENS * (2 * F + (N + 2 * K) * H + 2 * D) * 2   # one layer's transients, bf16
LOGITS = TOKENS * V * 4                                  # fp32 logits of a chip's tokens
OFFLOAD_QKV = "decoder_layer_input,query_proj,key_proj,value_proj"
OFFLOAD_ALL = OFFLOAD_QKV + ",out_proj"


def _logits(n: int) -> float:
    """The logits and their gradient, one chunk's of n, beside the gathered unembedding and its
    gradient (bf16) once the loss is chunked."""
    return 2 * LOGITS / n + (2 * D * V * 2 if n > 1 else 0)


def test_the_whole_loss_holds_21_gb_of_fp32_logits_a_chip():
    assert LOGITS == pytest.approx(21.0e9, rel=1e-3)   # 5 x 8192 x 128256 x 4 B
    for n in (1, 16):
        cfg = workloads.make_config("llama_train", "70b", {**SHAPE, "num_vocab_tiling": str(n)})
        assert memory.train_bytes(cfg, MESH)["logits"] == pytest.approx(_logits(n))


@pytest.mark.parametrize("budget, chunks", [(32e9, 4), (20e9, 8), (15.5e9, 64)])
def test_the_fewest_chunks_that_bring_the_step_within_the_budget(budget, chunks):
    # the layer input offloaded: nothing a layer keeps stays in HBM
    sets = {"remat": "custom", "remat_offload": OFFLOAD_ALL}
    need = lambda n: STATE + LAYER + _logits(n)  # noqa: E731
    fewer = fit.divisors(8192)[fit.divisors(8192).index(chunks) - 1]
    assert need(chunks) <= budget < need(fewer)
    trial, modelled = fit.chunked(CFG, MESH, sets, budget, SHAPE)
    assert trial == {"num_vocab_tiling": str(chunks), **sets}
    assert modelled == pytest.approx(need(chunks), rel=1e-9)


def test_the_layer_inputs_alone_rule_out_every_policy_that_keeps_them_in_hbm():
    # 80 layers x 40960 tokens x 8192 x 2 B = 53.7 GB of layer inputs: past a v6e's 32 GB
    assert L * TOKENS * D * 2 == pytest.approx(53.7e9, rel=1e-3)
    trials = fit.trials(CFG, MESH, 32e9, SHAPE)
    kept = [t.sets.get("remat_offload") for t in trials if t.need_bytes <= 32e9]
    assert kept == [OFFLOAD_ALL, OFFLOAD_QKV, "decoder_layer_input"]
    # compiled cheapest first by predicted step time, not HBM policies before offloads: each
    # offload recomputes the layer's forward but for what it offloads. Leaving out out_proj
    # recomputes 2·N·H·D a token and layer, then Q, K, V 2·D·(N + 2K)·H more, 80 layers x
    # 40960 tokens at a v6e's 920 TFLOP/s: 0.48 s, then 0.60 s
    assert 80 * TOKENS * 2 * N * H * D / 920e12 == pytest.approx(0.478, abs=1e-3)
    assert 80 * TOKENS * 2 * D * (N + 2 * K) * H / 920e12 == pytest.approx(0.598, abs=1e-3)
    # ...while the host link, 2 x the offloaded bytes at 32 GB/s (174.5 GB at most: 10.9 s),
    # stays under the step's ~24 s of FLOPs (6 · 70B · 40960 tokens alone is 18.7 s)
    assert 2 * TOKENS * L * (2 * D + (N + 2 * K) * H) * 2 / 32e9 == pytest.approx(10.9, abs=0.05)
    assert 6 * 70.55e9 * TOKENS / 920e12 == pytest.approx(18.8, abs=0.1)
    order = search.ordered([t for t in trials if t.need_bytes <= 32e9], "tpu-v6e")
    assert [t.sets["remat_offload"] for t in order] == kept


def test_offloading_out_proj_too_is_past_the_host_memory_libtpu_gives_a_v6e_chip():
    # libtpu 0.0.42.1 refused it: "Used 162.50G of 128.00G host"; 40960 tokens x 80 layers x
    # (D + (N + 2K)H + D) x 2 B
    host = {t.sets.get("remat_offload"): t.host_bytes for t in fit.trials(CFG, MESH, 32e9, SHAPE)}
    assert host[OFFLOAD_ALL] == pytest.approx(TOKENS * L * (2 * D + (N + 2 * K) * H) * 2)
    assert host[OFFLOAD_ALL] / 2**30 == pytest.approx(162.50, abs=0.005)
    assert host[OFFLOAD_QKV] == pytest.approx(TOKENS * L * (D + (N + 2 * K) * H) * 2)  # 120.8 GB
    kept, words = search.prune("llama_train", fit.trials(CFG, MESH, 32e9, SHAPE), 32e9,
                               128 * 2**30)
    assert [t.sets["remat_offload"] for t in kept] == [OFFLOAD_QKV, "decoder_layer_input"]
    assert words == ("the memory model put 11 of 14 settings past its 32 GB of HBM and 1 past "
                     "the 128.00 GiB of host memory libtpu gives a chip before compiling")


# forward FLOPs a token of one layer (transformers.md: 2 · input width · output width a
# matmul): Q, K, V, out_proj; the gated MLP's three; causal attention over 8192 keys (4·T·N·H,
# halved)
QKV_FLOPS, OUT_FLOPS = 2 * D * (N + 2 * K) * H, 2 * N * H * D
MLP_FLOPS, ATTN_FLOPS = 3 * 2 * D * F, 4 * 8192 * N * H / 2
LAYER_FORWARD = QKV_FLOPS + OUT_FLOPS + MLP_FLOPS + ATTN_FLOPS


@pytest.mark.parametrize("policy, flops", [
    ("none", 0), ("minimal_with_context", 0),             # everything kept
    ("minimal", ATTN_FLOPS), ("dots", ATTN_FLOPS),         # the projections kept
    ("save_dot_except_mlpwi", 2 * 2 * D * F + ATTN_FLOPS),
    ("save_qkv_proj", OUT_FLOPS + MLP_FLOPS + ATTN_FLOPS),
    ("qkv_proj_offloaded", OUT_FLOPS + MLP_FLOPS + ATTN_FLOPS),
    ("full", LAYER_FORWARD)])
def test_a_policy_recomputes_the_forward_of_what_it_neither_saves_nor_offloads(policy, flops):
    pol = remat.POLICIES[policy]
    assert pol.recompute_flops(CFG, 8192, causal=True) == pytest.approx(flops, rel=1e-12)
    # 70B's layer: 1.85 GFLOPs a token, 2 x its 0.856e9 matmul parameters and the attention
    assert LAYER_FORWARD == pytest.approx(2 * (3 * D * F + 2 * D * (N + K) * H) + 2 * 8192 * N
                                          * H) == pytest.approx(1.8455e9, rel=1e-4)


def test_full_remat_is_one_more_forward_of_the_layers_and_chunks_one_more_unembedding():
    # transformers.md (reference §5.2): block remat takes a step from 6·P·tokens to 8·P·tokens,
    # the layers' forward once more; the chunked loss its output projection, 2·D·V a token
    at = lambda **sets: workloads.make_config(  # noqa: E731
        "llama_train", "70b", {**SHAPE, **{k: str(v) for k, v in sets.items()}})
    none, full = fit.step_flops(at(remat="none"), MESH), fit.step_flops(at(remat="full"), MESH)
    assert full - none == pytest.approx(L * TOKENS * LAYER_FORWARD, rel=1e-9)
    # 6 · matmul parameters · tokens + causal attention (12·T·N·H·L halved), a chip's tokens
    matmul = L * (3 * D * F + 2 * D * (N + K) * H) + D * V
    assert none == pytest.approx(6 * matmul * TOKENS + 6 * 8192 * N * H * L * TOKENS, rel=1e-9)
    chunked = fit.step_flops(at(remat="none", num_vocab_tiling=4), MESH)
    assert chunked - none == pytest.approx(2 * D * V * TOKENS, rel=1e-9)


def test_the_predicted_step_is_the_flops_at_peak_unless_the_host_link_takes_longer():
    # roofline.md: max(T_math, T_comms); a v6e: 920 TFLOP/s bf16, PCIe 32 GB/s each way
    compute = FitTrial({}, "offload", "x", 25e9, host_bytes=100e9, flops=9.2e15)
    assert search.predicted_s(compute, "tpu-v6e") == pytest.approx(10.0)      # 6.25 s on PCIe
    host = FitTrial({}, "offload", "y", 0.0, host_bytes=320e9, flops=9.2e15)
    assert search.predicted_s(host, "tpu-v6e") == pytest.approx(20.0)         # 2 x 320 / 32
    # a tie (10 s each) goes to the fewer HBM bytes
    a, b = (FitTrial({"n": str(i)}, "remat", "z", need, flops=9.2e15) for i, need in
            ((1, 30e9), (2, 20e9)))
    assert search.ordered([a, host, b, compute], "tpu-v6e") == [b, compute, a, host]


class _Job:
    def __init__(self, over_gib: float | None):
        self.over_gib = over_gib

    def result(self):
        if self.over_gib is not None:
            raise aot.HbmExhausted(
                "XLA:TPU for v6e:16x16: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
                f"memory required for HLO temporaries ({31.25 + self.over_gib:.2f}G) exceeds "
                "available HBM (31.25G).")
        return "compiled"


def test_a_refused_setting_is_retried_with_the_chunks_that_save_the_excess(monkeypatch):
    # a stand-in libtpu that places the step only with 16 chunks or more, 0.75 GiB over else
    tried = []

    def fake(name, preset, overrides, mesh, tpu_chip=None, cache_dir=None):
        tried.append(overrides["num_vocab_tiling"])
        assert overrides["remat_offload"] == OFFLOAD_QKV and overrides["B"] == "1280"
        return _Job(None if int(overrides["num_vocab_tiling"]) >= 16 else 0.75)

    monkeypatch.setattr(aot, "start_compile", fake)
    overrides, note = search.choose(TRAIN, "70b", SHAPE, "16x16", "tpu-v6e", None)
    # 4 chunks refused, 0.805 GB over: the model must save that, 4 -> 8 (24.95 -> 19.70 GB);
    # refused again: 8 -> 16 (19.70 -> 17.07 GB, 2.63 GB saved)
    assert tried == ["4", "8", "16"]
    # the state donated, as MaxText's step and the memory model have it
    assert overrides == {**SHAPE, "num_vocab_tiling": "16", "remat": "custom",
                         "remat_offload": OFFLOAD_QKV, "donate_state": "true"}
    assert note.startswith(f"num_vocab_tiling=16, remat=custom, remat_offload={OFFLOAD_QKV}, "
                           "donate_state=true (no remat given): the first setting that fits "
                           "tpu-v6e's HBM")
    # the 14 policies, 5 microbatches (B/M = 256 over the 256 chips) and a smaller batch
    assert "put 11 of 16 settings past its 32 GB of HBM and 1 past" in note
    assert "; 3 compiles in " in note and "num_vocab_tiling=8, remat=custom" in note


def test_when_nothing_fits_the_last_refused_setting_stays_and_the_note_says_so(monkeypatch):
    tried = []
    monkeypatch.setattr(aot, "start_compile",
                        lambda *a, **k: tried.append(a[2]) or _Job(40.0))   # no chunks save it
    overrides, note = search.choose(TRAIN, "70b", SHAPE, "16x16", "tpu-v6e", None)
    # the three the model kept that the search may build (the smaller batch it ranks is not),
    # no retry
    assert len(tried) == 3 and tried[1]["microbatches"] == "5"
    assert overrides == {**SHAPE, **tried[-1]} and overrides["remat_offload"] == (
        "decoder_layer_input")
    assert note.startswith("no setting fits tpu-v6e's HBM: the memory model put 11 of 16")
    assert "3 compiles in" in note and note.count("refused") == 1


def test_only_without_remat_for_a_tpu_compile_of_a_workload_with_knobs():
    assert search.wanted(TRAIN, {"B": "8"}, "tpu-v5p")
    assert not search.wanted(TRAIN, {"remat": "full"}, "tpu-v5p")
    assert not search.wanted(TRAIN, {}, None)                  # XLA:CPU judges no fit
    assert not search.wanted(workloads.get("llama_decode"), {}, "tpu-v5p")
    assert TRAIN.remat_order[0] == "none" and TRAIN.remat_order[-1] == "full"


@pytest.mark.slow
@pytest.mark.libtpu
def test_libtpu_refuses_keeping_everything_and_a_policy_that_keeps_less_fits():
    # 32 layers of D = 512 over 4 x 8192 tokens per chip: ~20·D·tokens·L·2 bytes = 21 GB of
    # activations kept without remat, 1 GB of layer inputs with full remat; a v5e has 16 GB
    sets = {"L": "32", "D": "512", "F": "2048", "N": "8", "K": "4", "H": "128", "B": "16",
            "T": "8192", "parallelism": "fsdp"}
    overrides, note = search.choose(TRAIN, "tiny", sets, "2x2", "tpu-v5e", None)
    # kept less: a remat policy, or microbatches (each keeps 1/M of the activations)
    assert overrides["remat"] != "none" or int(overrides.get("microbatches", "1")) > 1, overrides
    assert note.startswith(f"num_vocab_tiling={overrides['num_vocab_tiling']}, ")
    assert f"remat={overrides['remat']}" in note and "(no remat given)" in note


def test_the_search_donates_the_state_unless_told_otherwise():
    # the memory model counts the parameters and optimizer state once: donated, as MaxText's
    # train step does; a donate_state given is the user's and stays
    donated = fit.trials(CFG, MESH, 32e9, SHAPE)
    assert {t.sets["donate_state"] for t in donated} == {"true"}
    given = {**SHAPE, "donate_state": "false"}
    assert all("donate_state" not in t.sets for t in fit.trials(CFG, MESH, 32e9, given))
