"""``harness predict``: the book's answers from the command line, tables and JSON, clean errors."""
from __future__ import annotations

import json

import pytest

from harness import cli


@pytest.fixture(autouse=True)
def _keep_xla_flags(monkeypatch):
    # harness.cli.main sets XLA_FLAGS for --devices; restore it after each test
    monkeypatch.setenv("XLA_FLAGS", "")


def run(capsys, *argv):
    code = cli.main(["predict", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_train_example_of_the_issue(capsys):
    # applied-training.md: 6.3e24 / (8960 * 4.59e14 * 0.4) = 3.8e6 s ~ 44 days
    argv = ("train", "--model", "llama3-70b", "--chip", "tpu-v5p", "--num-chips", "8960",
            "--tokens", "15e12", "--mfu", "0.4")
    data = run_json(capsys, *argv)
    assert data["seconds"] == pytest.approx(3.8e6, rel=0.02)
    assert data["flops"] == pytest.approx(6.3e24, rel=0.01)
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert "44.7 days" in out and "compute" in out and "training.md" in out


def test_train_with_a_batch_adds_the_step_model(capsys):
    data = run_json(capsys, "train", "--model", "llama3-70b", "--chip", "tpu-v5p", "--num-chips",
                    "8960", "--tokens", "15e12", "--batch", "4194304", "--layout", "fsdp_tp",
                    "--spans", "2x1")
    # applied-training.md: 2048-way FSDP x 4-way TP
    assert (data["step"]["X"], data["step"]["Y"]) == (2048, 4)
    assert data["step"]["bound"] in ("compute", "comm")
    assert data["memory"]["fits"] is True


def test_decode_example_of_the_issue(capsys):
    # applied-inference.md: int8 LLaMA-3 70B, batch 32, 8k context on a v5e 4x2: ~17 ms
    argv = ("decode", "--model", "llama3-70b", "--chip", "tpu-v5e", "--num-chips", "8",
            "--batch", "32", "--context", "8192", "--int8")
    data = run_json(capsys, *argv)
    assert data["step_s"] == pytest.approx(17e-3, rel=0.03)
    assert data["bound"] == "memory"
    assert data["critical_batch"] == pytest.approx(120, rel=0.01)
    code, out, _ = run(capsys, *argv)
    assert code == 0
    for term in ("kv time", "param time", "flops time", "step time", "memory", "inference.md"):
        assert term in out


def test_prefill(capsys):
    # applied-inference.md: 0.91 s for 8192 tokens on 16 v5e at 40% MFU
    data = run_json(capsys, "prefill", "--model", "llama3-70b", "--chip", "tpu-v5e", "--num-chips",
                    "16", "--tokens", "8192", "--mfu", "0.4")
    assert data["seconds"] == pytest.approx(0.91, rel=0.02) and data["bound"] == "compute"


def test_collective_example_of_the_issue(capsys):
    # sharding.md: 34 MB over an axis of 4 on v5e (no wraparound): 3 * 8.4e6 / 4.5e10 ~ 560 us
    argv = ("collective", "all-gather", "--bytes", "34e6", "--mesh", "4", "--chip", "tpu-v5e")
    data = run_json(capsys, *argv)
    assert data["seconds"] == pytest.approx(560e-6, rel=0.02)
    assert data["wraps"] == [False] and data["bound"] == "bandwidth"
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "567 us" in out and "bandwidth" in out
    # several axes: sharding.md Q2(b), 2BD/(2W) ~ 46 us on a v4p cube
    data = run_json(capsys, "collective", "all-gather", "--bytes", str(2 * 1024 * 4096),
                    "--mesh", "4x4", "--chip", "tpu-v4p")
    assert data["seconds"] == pytest.approx(46e-6, rel=0.02) and data["axes"] == [4, 4]
    forced = run_json(capsys, *argv, "--wraparound", "yes")
    assert forced["seconds"] == pytest.approx(34e6 / 9e10)
    # tpus.md Q5: point-to-point over 2 links, 6 hops
    p2p = run_json(capsys, "collective", "ppermute", "--bytes", str(2 * 8 * 128 * 8192),
                   "--chip", "tpu-v5e", "--links", "2", "--hops", "6")
    assert p2p["seconds"] == pytest.approx(186e-6, rel=0.005)


def test_matmul(capsys):
    data = run_json(capsys, "matmul", "--B", "128", "--D", "8192", "--F", "28672", "--chip",
                    "tpu-v5e")
    assert data["bound"] == "memory" and data["flops"] == 2 * 128 * 8192 * 28672
    assert data["critical_intensity"] == pytest.approx(240, rel=0.01)


def test_chips_lists_the_registry(capsys):
    data = run_json(capsys, "chips")
    assert {"tpu-v5e", "tpu-7x", "h100", "b200", "cpu"} <= set(data)
    code, out, _ = run(capsys, "chips")
    assert code == 0 and "tpu-v5p" in out and "16x20x28" in out


@pytest.mark.parametrize("argv, fragment", [
    (("train", "--model", "gpt-9", "--chip", "tpu-v5p", "--num-chips", "8", "--tokens", "1e9"),
     "unknown model 'gpt-9'; known models: llama3-8b"),
    (("decode", "--model", "llama3-8b", "--chip", "tpu-v9", "--num-chips", "8", "--batch", "1",
      "--context", "10"), "unknown chip 'tpu-v9'; known chips: tpu-v3"),
    (("collective", "all-gather", "--bytes", "1e6", "--mesh", "32", "--chip", "tpu-v5e"),
     "at most 16 per axis"),
    (("collective", "all-reduce", "--bytes", "-5", "--mesh", "4", "--chip", "tpu-v5e"),
     "nbytes must be a positive"),
    (("collective", "all-reduce", "--bytes", "lots", "--mesh", "4", "--chip", "tpu-v5e"),
     "--bytes must be a number"),
    (("decode", "--model", "llama3-8b", "--chip", "tpu-v5e", "--num-chips", "8", "--batch", "0",
      "--context", "10"), "batch must be positive"),
    (("train", "--model", "llama3-8b", "--chip", "tpu-v5e", "--num-chips", "2.5", "--tokens",
      "1e9"),
     "--num-chips must be a whole number"),
    (("matmul", "--B", "0", "--D", "8", "--F", "8", "--chip", "h100"), "B must be positive"),
    (("train", "--model", "llama3-8b", "--chip", "tpu-v5e", "--num-chips", "8", "--tokens", "1e9",
      "--mfu", "2"), "mfu must be in (0, 1]"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness predict: error:")
    assert fragment in lines[0]


def test_the_book_answers_import_neither_pandas_nor_jax():
    """``harness predict`` is a calculator: its command and ``harness.plan.book`` load only the
    book's library (``harness.plan`` re-exports its ranking lazily)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, harness.commands.predict, harness.plan.book; "
            "print(sorted(m for m in ('pandas', 'jax', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
