"""Issue 54 part 3: an MoE run's routing measured: tokens per expert, drops, the routed FLOPs
(book §5.4: 2·tokens·k·D·F·3 forward for a gated MLP, a training step three times that) and the
routing straggler of the tiled expert loop. Expected numbers are arithmetic on the tiny preset:
B·T = 8·16 = 128 tokens, D = 64, F = 64, E = 8, L = 2, tile 8; ``router_bias=10`` makes
expert 0 every token's first choice (its logit 10 above logits of order 0.1)."""
from __future__ import annotations

import json
import math
import sys
from collections import Counter

import pytest

from harness.report import document
from harness.step import routing

TOKENS, D, F, E, L, TILE = 8 * 16, 64, 64, 8, 2, 8


def _layer(tokens_E, dropped=0):
    return {"tokens_per_expert": tokens_E, "dropped": dropped}


def test_layer_statistics_from_arithmetic():
    t = [128, 20, 20, 20, 20, 20, 20, 8]       # 256 = 128 tokens · k=2 choices
    s = routing.layer_stats(t, 0, 1.0, TOKENS, 2)
    assert (s["min"], s["median"], s["max"], s["busiest"]) == (8, 20, 128, 0)
    assert s["imbalance"] == pytest.approx(128 / (128 * 2 / 8))   # 4x the mean of 32
    balanced = routing.layer_stats([32] * 8, 0, 1.0, TOKENS, 2)
    assert balanced["imbalance"] == 1.0


def test_tiles_follow_the_tokens():
    # experts 2 a device over Z=4: device 0 holds experts 0, 1: ceil(128/8) + ceil(20/8) = 19
    layers = [_layer([128, 20, 20, 20, 20, 20, 20, 8])]
    assert routing.tiles(layers, 4, TILE) == [16 + 3, 3 + 3, 3 + 3, 3 + 1]
    d = routing.imbalance(layers, TOKENS, 2, TILE, 9, [[0, 4], [1, 5], [2, 6], [3, 7]],
                          {0: 3e-3, 4: 2e-3, 1: 1e-3, 5: 1e-3, 2: 1e-3, 6: 1e-3, 3: 1e-3,
                           7: 1e-3})
    assert (d["tiles"], d["tiles_others"], d["devices"]) == (9 * 19, 9 * 6, [0, 4])
    assert d["wait_s"] == pytest.approx(3e-3 - 1e-3)
    assert "expert 0 got 128 of 128 tokens (4x the mean)" in routing.imbalance_line(d)


PARSED: Counter = Counter()  # HLO text -> times parse_module read it, in the tiled run


def _counted(parse):
    def parse_module(text):
        PARSED[text] += 1
        return parse(text)
    return parse_module


@pytest.fixture(scope="module")
def tiled_run(tmp_path_factory):
    from harness.hlo import parse
    from harness.runs.workload import run_workload

    original = parse.parse_module
    counted = _counted(original)
    with pytest.MonkeyPatch.context() as mp:  # in every module imported that holds it by name
        for module in list(sys.modules.values()):
            if getattr(module, "parse_module", None) is original:
                mp.setattr(module, "parse_module", counted)
        # priced on a named chip: no calibration of the host's CPU (the counts do not need it)
        return run_workload("llama_train", preset="tiny_moe_tiled", mesh="expert=8",
                            overrides={"router_bias": 10.0}, steps=1, warmup=1, chip="h100",
                            out=tmp_path_factory.mktemp("runs"), with_plots=False)


def test_each_module_parsed_once(tiled_run):
    # the routing section reads the HLO the analysis parsed (run.modules), not a second parse
    assert tiled_run.capture.hlo_text in PARSED
    assert max(PARSED.values()) == 1, sorted(PARSED.values())
    assert any(m is not None and m.name == tiled_run.capture.program
               for m in tiled_run.modules.values())


def test_biased_tiled_run_names_expert_0(tiled_run):
    from workloads.llama.moe_gmm import trips

    d = tiled_run.meta[routing.ROUTING]
    assert d["tokens"] == TOKENS and d["Z"] == 8 and len(d["layers"]) == L
    for layer in d["layers"]:
        assert layer["tokens_per_expert"][0] == TOKENS        # every token chose expert 0
        assert sum(layer["tokens_per_expert"]) == TOKENS * 2  # and one other
        assert layer["dropped"] == 0 and layer["busiest"] == 0
        assert layer["imbalance"] == pytest.approx(4.0)       # 128 over a mean of 128·2/8
    # book §5.4: 2·tokens·k·D·F a matrix forward, 3 matrices, a training step 3 passes
    assert d["routed_flops"] == 2 * TOKENS * 2 * D * F * 3 * 3 * L
    # 9 tiled loops a layer (3 forward, dx and dW of each backward), expert 0's device alone:
    # 9 · L · ceil(128/8) tiles; another device: its one expert's tiles in each layer
    im = d["imbalance"]
    assert im["expert"] == 0 and im["devices"] == [0]
    assert im["tiles"] == 9 * L * math.ceil(TOKENS / TILE)
    others = [9 * sum(trips([lay["tokens_per_expert"][z]], TILE) for lay in d["layers"])
              for z in range(1, 8)]
    assert im["tiles_per_device"][1:] == others
    assert im["wait_s"] >= 0 and im["busiest_s"] > 0
    loops = [m for m in d["matmuls"] if m["form"] == "tiled"]
    assert len(loops) == 9
    # a loop's routed FLOPs per device and step: 2·D·F for each of the 128·2/8 token-choices
    # a device's expert got in a layer (mean over devices), in each of the L layers; the 9
    # loops together: 2·tokens·k·D·F·3 matrices forward, three times that in training, over Z
    assert loops[0]["routed_flops"] == pytest.approx(2 * D * F * (TOKENS * 2 / 8) * L)
    assert sum(m["routed_flops"] for m in loops) == pytest.approx(
        2 * TOKENS * 2 * D * F * 3 * 3 * L / 8)


def test_report_shows_the_routing_section(tiled_run):
    text = document.render(tiled_run, "text")
    assert "routing imbalance: expert 0 got 128 of 128 tokens (4x the mean)" in text
    assert "tiles against" in text
    assert "## Routing" in document.render(tiled_run, "md", plots=False)
    assert "<h2>Routing</h2>" in document.render(tiled_run, "html", plots=False)
    got = json.loads(document.render(tiled_run, "json"))["routing"]
    assert got["layers"][0]["tokens_per_expert"][0] == TOKENS


def _routing_of(overrides: dict) -> dict:
    """The routing section from one prefill step of tiny_moe (B·T = 8·16 tokens, forward
    only: a faster compile than a train step), no capture."""
    from harness.runs.workload import build_workload

    built = build_workload("llama_prefill", "tiny_moe", overrides, "expert=8")
    return routing.of_built(built, None, None)


def test_capacity_drops_equal_arithmetic():
    # k=1, every token to expert 0; a device's group n = 128/8 = 16 tokens, capacity
    # C = ceil(1.25 · 16 · 1 / 8) = 3: 16 − 3 dropped on each of 8 devices
    d = _routing_of({"experts_impl": "capacity", "capacity_factor": 1.25, "router_bias": 10.0,
                     "k": 1})
    C = math.ceil(1.25 * 16 * 1 / 8)
    for layer in d["layers"]:
        assert layer["tokens_per_expert"] == [TOKENS] + [0] * 7
        assert layer["dropped"] == 8 * (16 - C)
        assert layer["drop_share"] == pytest.approx(8 * (16 - C) / TOKENS)
    assert d["routed_flops"] == 2 * (TOKENS - 8 * (16 - C)) * D * F * 3 * L   # forward
    assert f"{L * 8 * (16 - C)} token-choices dropped over the {L} layers (81%)" in \
        routing.imbalance_line(d["imbalance"])          # 104 of 128 choices in each layer


def test_balanced_router_is_near_even():
    d = _routing_of({})
    for layer in d["layers"]:
        assert sum(layer["tokens_per_expert"]) == TOKENS * 2 and layer["dropped"] == 0
        assert 1.0 <= layer["imbalance"] < 2.0      # a biased router's is 4
