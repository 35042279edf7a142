"""``harness predict serve``/``speculative`` and ``harness plan llama_decode``: the book's
applied-inference answers for LLaMA-3 70B on TPU v5e from the command line, the serving layouts
ranked by the arithmetic (nothing compiled unless asked) and the frontier drawn."""
from __future__ import annotations

import json

import pytest

from harness import cli


@pytest.fixture(autouse=True)
def _keep_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")  # harness.cli.main sets it for --devices


def run_json(capsys, *argv):
    code = cli.main([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_predict_serve_gives_the_book_answers(capsys):
    data = run_json(capsys, "predict", "serve", "--model", "llama3-70b", "--chip", "tpu-v5e",
                    "--context", "8192", "--generate", "512", "--price", "1.2")
    by = data["precisions"]
    # applied-inference.md: smallest slices 4x4, 4x2, 2x2; 19 ms a step with the HBM full;
    # QPS per chip 43 / (0.019 * 512 * N) (bf16 0.27)
    for prec, N in (("bf16", 16), ("int8", 8), ("int4", 4)):
        d = by[prec]
        assert d["chips"] == d["smallest_slice"] == N
        assert abs(d["b_max"] - 43) <= 1
        assert d["full_hbm_step_s"] == pytest.approx(16e9 / 8.2e11)
        assert d["step_s"] == pytest.approx(0.019, rel=0.03)
        assert d["qps_per_chip"] == pytest.approx(43 / (0.019 * 512 * N), rel=0.05)
        # cost from the price given: $1.2 / 3600 / (tokens/s/chip) * 1e6
        assert d["usd_per_mtok"] == pytest.approx(1.2 / 3600 / d["tokens_per_s_per_chip"] * 1e6)
        # prefill:generate = (B/g) * T_prefill / T_step
        assert d["prefill_generate"] == pytest.approx(
            d["b_max"] / 512 * d["ttft_s"] / d["step_s"])
    assert by["bf16"]["qps_per_chip"] == pytest.approx(0.27, rel=0.03)
    code = cli.main(["predict", "serve", "--model", "llama3-70b", "--chip", "tpu-v5e",
                     "--prompt", "1024", "--int8", "--latency", "0.015"])
    out = capsys.readouterr().out
    assert code == 0 and "latency-throughput frontier" in out and "int8: slice for 15 ms" in out
    assert "bf16" not in out


def test_predict_serve_needs_a_prompt(capsys):
    code = cli.main(["predict", "serve", "--model", "llama3-70b", "--chip", "tpu-v5e"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "give --prompt" in err[0]


def test_predict_speculative(capsys):
    data = run_json(capsys, "predict", "speculative", "--acceptance", "0.8", "--draft-tokens",
                    "4", "--draft-cost", "0.05")
    E = (1 - 0.8 ** 5) / (1 - 0.8)  # Leviathan et al. 2023, eq. 1
    assert data["tokens_per_step"] == pytest.approx(E)
    assert data["speedup"] == pytest.approx(E / (4 * 0.05 + 1))


def test_plan_llama_decode_ranks_serving_layouts_and_draws_the_frontier(capsys, tmp_path):
    html = tmp_path / "serve.html"
    data = run_json(capsys, "plan", "llama_decode", "--preset", "70b", "--chip", "tpu-v5e",
                    "--topology", "4x2", "--set", "int8_weights=true", "--set", "int8_kv=true",
                    "--html", str(html))
    best = data["layouts"][0]
    # reference §10 AI-3: int8, B = 32, 8k contexts on a 4x2: pure model parallelism, ~17 ms
    assert (best["kv_layout"], best["mesh"], best["fits"]) == ("heads", "1x8", "yes")
    assert best["serve_step_s"] == pytest.approx(0.017, rel=0.03)
    assert all(r["compiled"] == "no" for r in data["layouts"])  # arithmetic only by default
    assert [r["fits"] for r in data["layouts"][1:]] == ["no"] * (len(data["layouts"]) - 1)
    precisions = {r["precision"] for r in data["frontier"]}
    assert precisions == {"int8", "int4"}  # bf16's 141 GB of weights do not fit 8 x 16 GB
    page = html.read_text()
    assert "data:image/png;base64," in page and "latency-throughput frontier" in page


def test_plan_llama_decode_on_4x4_picks_the_batch_sharded_cache(capsys):
    data = run_json(capsys, "plan", "llama_decode", "--preset", "70b", "--chip", "tpu-v5e",
                    "--topology", "4x4", "--set", "int8_weights=true", "--set", "int8_kv=true")
    best = data["layouts"][0]
    # reference §7.4: past K = 8 heads the book shards the cache by batch; AI-3 on 4x4: ~8.5 ms
    assert (best["kv_layout"], best["mesh"]) == ("batch", "1x16")
    assert best["serve_step_s"] == pytest.approx(0.0085, rel=0.05)


def test_plan_train_refuses_the_serving_flags(capsys):
    code = cli.main(["plan", "--compile", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--compile are for llama_decode" in err[0]
