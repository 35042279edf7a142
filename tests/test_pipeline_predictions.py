"""``predictions.pipeline`` and ``harness predict pipeline`` (issue 53): the bubble per schedule,
what crosses between stages (gpus.md), the DP/ZeRO thresholds a pipeline moves and the book's
own pipelining answers, read from its text (gpus.md, "Pipeline Parallelism", "What does LLaMA-3
do?", Quiz 5 Q2 and Q3). Expected values are arithmetic written here."""
from __future__ import annotations

import json

import pytest

from predictions import pipeline


@pytest.mark.parametrize("S, M, expected", [(4, 8, 3 / 11), (16, 16, 15 / 31)])
def test_gpipe_and_1f1b_share_one_bubble(S, M, expected):
    assert pipeline.bubble("gpipe", S, M) == pytest.approx(expected)
    assert pipeline.bubble("1f1b", S, M) == pytest.approx(expected)


def test_repeats_divide_the_bubble_and_zero_bubble_schedules_shrink_it():
    # v=2 at S=4, M=8: 3/(16 + 3) = 3/19; ZB-H1: 3/(24 + 3) = 1/9; ZB-H2: none
    assert pipeline.bubble("circular", 4, 8, 2) == pytest.approx(3 / 19)
    assert pipeline.bubble("interleaved", 4, 8, 2) == pytest.approx(3 / 19)
    assert pipeline.bubble("zb-h1", 4, 8) == pytest.approx(1 / 9)
    assert pipeline.bubble("zb-h2", 4, 8) == 0.0
    # the bubble's time: 1 s of stage work at 3/11 idle takes 11/8 s
    assert pipeline.step_time(1.0, "gpipe", 4, 8) == pytest.approx(11 / 8)
    with pytest.raises(ValueError, match="valid: gpipe, 1f1b, circular"):
        pipeline.bubble("pipedream", 4, 8)


def test_what_the_first_stage_holds():
    # GPipe every microbatch (M), 1F1B S of them, ZB-H2 2S − 1 (never more than M)
    assert pipeline.held_microbatches("gpipe", 4, 8) == 8
    assert pipeline.held_microbatches("1f1b", 4, 8) == 4
    assert pipeline.held_microbatches("1f1b", 8, 4) == 4
    assert pipeline.held_microbatches("zb-h2", 4, 8) == 7
    # one microbatch's checkpoints over the stage's layers: 2·D·(B/M)·L/S bytes, here 1 MB
    assert pipeline.activation_bytes("1f1b", 4, 8, 1e6) == 4e6
    assert pipeline.activation_bytes("gpipe", 4, 8, 1e6) == 8e6


def test_stage_to_stage_transfers_as_gpus_md_gives_them():
    # B = 1e6 tokens, D = 8192, W = 50e9 B/s, 8 microbatches, 4 stages:
    # a hop 2·1e6·8192/(50e9·8) = 40.96 ms, M + S − 2 = 10 hops = 409.6 ms
    assert pipeline.hop_s(1e6, 8192, 50e9, 8) == pytest.approx(0.04096)
    assert pipeline.stage_comm_s(1e6, 8192, 50e9, 8, 4) == pytest.approx(0.4096)
    # per layer, over 80 layers: 1.5·2·1e6·8192/(50e9·80) = 6.144 ms
    assert pipeline.per_layer_comm_s(1e6, 8192, 50e9, 80) == pytest.approx(6.144e-3)


def test_the_books_pipelining_answers():
    # gpus.md, Quiz 5 Q2.3: LLaMA-3 70B, 8-way TP x 8-way PP spans 8 nodes: 400 GB/s -> 3200,
    # "the roofline then is 990e12 / 3200e9 = 309"
    gain = pipeline.outer_axis_gain(8, 8)
    assert gain == 8
    assert pipeline.dp_min_tokens(990e12, 400e9, gain) == pytest.approx(309.375)
    # "What does LLaMA-3 do?": 8-way TP, 16-way PP: "reduces the cost of the data parallel
    # AllReduce by 16x"; without it "a batch size of at least 40M tokens" on 16k GPUs
    assert pipeline.outer_axis_gain(16, 8) == 16
    assert pipeline.dp_min_tokens(990e12, 400e9) * 16384 == pytest.approx(40.55e6, rel=1e-3)
    # Quiz 5 Q3 (Megatron-LM): 16-way and 64-way PP + TP give "2x and 8x better throughput
    # at the spine level": compute-bound at "roughly 1k and 300 tokens"
    assert pipeline.dp_min_tokens(990e12, 400e9, pipeline.outer_axis_gain(2, 8)) == \
        pytest.approx(1237.5)
    assert pipeline.dp_min_tokens(990e12, 400e9, pipeline.outer_axis_gain(8, 8)) < 310
    # within a node the model-parallel group spans nothing: no gain
    assert pipeline.outer_axis_gain(2, 2) == 1.0


def test_zero3_inside_a_pipeline_pays_per_microbatch():
    # gpus.md: ZeRO-3 gathers the weights every microbatch with B/N_MB tokens to amortize it:
    # 16 microbatches need 16x the tokens per chip
    assert pipeline.dp_min_tokens(990e12, 400e9, 16, 16) == pytest.approx(990e12 / 400e9)
    # the extra bytes: (M − 1)·12·D·F·L/(S·Y) = 3·12·8192·28672·80/(4·8) = 2.536e10
    assert pipeline.zero3_penalty_bytes(8192, 28672, 80, 4, 4, 8) == pytest.approx(
        3 * 12 * 8192 * 28672 * 80 / 32)


def test_link_between_stages():
    assert pipeline.link_bytes_per_s("h100") == 50e9          # 400e9 node egress / 8 GPUs
    assert pipeline.link_bytes_per_s("tpu-v5p", "ici") == 90e9
    with pytest.raises(ValueError, match="no node bandwidth"):
        pipeline.link_bytes_per_s("tpu-v5p", "node")


def test_harness_predict_pipeline_answers_for_llama3_405b(capsys, monkeypatch):
    from harness import cli

    monkeypatch.setenv("XLA_FLAGS", "")
    argv = ["predict", "pipeline", "--model", "llama3-405b", "--chip", "h100",
            "--mesh", "stage=16,model=8,data=128", "--batch", "16e6", "--microbatches", "16"]
    assert cli.main([*argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["N"] == 16384 and data["outer_axis_gain"] == 16
    assert data["bubble"]["1f1b"] == pytest.approx(15 / 31)
    # 16e6 tokens over 128 replicas = 125,000 a pipeline: a hop 2·125e3·16384/(50e9·16)
    assert data["hop_s"] == pytest.approx(2 * 125e3 * 16384 / (50e9 * 16))
    assert data["tokens_per_chip"] == pytest.approx(16e6 / 16384)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "compute-bound" in out and "gpus.md" in out and "bubble zb-h2" in out
    assert cli.main([*argv[:6], "--mesh", "16x8", *argv[8:]]) == 2
    assert "name the axes by role" in capsys.readouterr().err
