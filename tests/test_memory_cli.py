"""``harness memory``: the tiny LLaMA train step's peaks side by side and its buffers at the
peak; bad input in one line; a program past a small device limit (ahead of time for a v5e)."""
from __future__ import annotations

import json

import pytest

from harness import schema
from harness.cli import main
from harness.memory import kinds


def test_unknown_workload_is_one_line(capsys):
    assert main(["memory", "no_such_workload"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "llama_train" in err


@pytest.fixture(scope="module")
def tiny_train(tmp_path_factory):
    out = tmp_path_factory.mktemp("memory") / "tiny.json"
    assert main(["memory", "llama_train", "--format", "text", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_tiny_train_peaks_side_by_side(tiny_train):
    r = tiny_train
    holds = {row[schema.HOLDS]: row for row in r["holds"]}
    # one device: P parameters of bf16, AdamW's two fp32 moments (training.md §6.3)
    L, D, F, N, K, H, V = 2, 64, 128, 8, 4, 8, 256
    P = L * (3 * D * F + 2 * D * N * H + 2 * D * K * H + 2 * D) + D + 2 * V * D
    assert holds[kinds.PARAMETERS][schema.BOOK_BYTES] == 2 * P
    assert holds[kinds.OPTIMIZER][schema.BOOK_BYTES] == 8 * P
    # the compiled peak holds the arguments whole: the same bytes, from the HLO's parameters
    assert holds[kinds.PARAMETERS][schema.COMPILED_BYTES] == 2 * P
    assert holds[kinds.OPTIMIZER][schema.COMPILED_BYTES] == 8 * P + 4   # + AdamW's int32 step
    # the buffers at the peak add up to it, and those the program made name their source
    bufs = r["buffers"]
    assert sum(b[schema.BUFFER_BYTES] for b in bufs) == r["live_peak_bytes"]
    made = [b for b in bufs if b[schema.OPCODE] != "parameter"]
    assert any(b[schema.SOURCE_LINE].startswith("workloads/llama/") for b in made)
    # the peak within 10% of the book's, or the difference explained
    peak = holds["peak"]
    assert abs(peak[schema.DIFFERENCE]) <= 0.10 or peak[schema.EXPLAINED]
    assert r["measured_bytes"] is None and "not run" in r["measured_note"]
    # the timeline reaches the peak where XLA puts it
    assert max(p[schema.LIVE_BYTES] for p in r["timeline"]) >= r["live_peak_bytes"]


@pytest.mark.libtpu
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_past_a_small_limit_on_v5e_ends_in_the_report(monkeypatch, capsys):
    pytest.importorskip("libtpu")
    monkeypatch.setenv("SCALING_HARNESS_DEVICE_MEMORY", "64KiB")
    assert main(["memory", "llama_train", "--chip", "tpu-v5e", "--top", "3"]) == 1
    out = capsys.readouterr().out
    assert "a device holds 64.00 KiB: DOES NOT FIT" in out
    assert "XLA:TPU" in out
