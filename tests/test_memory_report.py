"""What predict-hlo and plan say about memory: libtpu's refusal read from real messages
(tests/fixtures/tpu/oom, libtpu 0.0.42.1), the refused config's report, the fit line's sum."""
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import schema
from harness.capture.memory import memory_fit
from harness.cli import main
from harness.plan import rank as plan_rank
from harness.plan.compiles import compile_line
from harness.plan.fit import (
    RefusalUnreadable,
    batch_that_fits,
    fit_line,
    parse_refusal,
    remat_hint,
)
from harness.plan.layouts import Candidate
from predictions.hardware import chip_entry
from workloads import aot, tpu

OOM = Path(__file__).parent / "fixtures" / "tpu" / "oom"
GiB = 2**30


def _real(name: str) -> str:
    return (OOM / f"{name}.txt").read_text()


@pytest.mark.parametrize("name, required", [("100m_b64_t2048_naive", 65.66),
                                            ("100m_b16_t2048_naive", 16.73),
                                            ("1b_b4_t128_dp", 27.91)])
def test_libtpu_refusals_read_from_real_messages(name, required):
    r = parse_refusal(_real(name))
    assert r.required_bytes == pytest.approx(required * GiB)
    # a v5e's 16 GiB less libtpu's reserve: libtpu's G is binary (16 GiB - 0.25 GiB)
    assert r.available_bytes == pytest.approx(16 * GiB - GiB / 4)
    assert r.what == "HLO temporaries"
    assert r.over_bytes == pytest.approx((required - 15.75) * GiB)


def test_text_that_is_not_a_refusal_says_what_was_expected():
    with pytest.raises(RefusalUnreadable, match="exceeds available HBM"):
        parse_refusal("RESOURCE_EXHAUSTED: something else")


def test_batch_estimate_matches_real_compiles():
    # B=64 asks 65.66 GiB of 15.75: 64 * 15.75 / 65.66 = 15.35; the 2x2 mesh's X=2 must divide
    # B, so 14. libtpu compiled B=14 and it fit; B=16 was refused (fixtures/tpu/oom/README.md)
    assert batch_that_fits(parse_refusal(_real("100m_b64_t2048_naive")), 64,
                           lambda b: b % 2 == 0) == 14
    # 4 * 15.75 / 27.91 = 2.26 -> 2; a mesh that divides only multiples of 4 leaves nothing
    r = parse_refusal(_real("1b_b4_t128_dp"))
    assert batch_that_fits(r, 4, lambda b: True) == 2
    assert batch_that_fits(r, 4, lambda b: b % 4 == 0) is None


def test_remat_hint_names_the_policies_that_keep_less():
    order = ("none", "dots", "full")
    assert remat_hint(order, "dots", chose=False).startswith("remat=dots was given; policies "
                                                             "that keep less: full")
    assert remat_hint(order, "full", chose=False) == "remat=full already keeps the least"
    assert "none, dots, full" in remat_hint(order, None, chose=True)
    assert remat_hint((), "none", chose=False) == ""


def _numbers(text: str) -> list[float]:
    scale = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}
    return [float(v) * scale[u] for v, u in re.findall(r"([0-9.]+) (GB|MB|kB|B)\b", text)]


def test_fit_line_adds_up_and_says_which_figure_the_verdict_uses():
    fit = memory_fit({"arguments": 2e9, "outputs": 1e9, "aliased": 1e9, "temporaries": 8e9,
                      "code": 1e8, "peak": 6e9}, chip_entry("tpu-v5e"))
    line = fit_line(fit, "tpu-v5e")
    terms, rest = line.split(" = ", 1)
    a, o, al, t, c = _numbers(terms)
    shown_sum = _numbers(rest)[0]
    assert (a, o, al, t, c) == (2e9, 1e9, 1e9, 8e9, 1e8)
    assert a + o - al + t + c == pytest.approx(shown_sum) == pytest.approx(10.1e9)
    assert "- aliased 1 GB" in terms
    # the peak (6 GB) is what the verdict uses, 10.1 - 6 = 4.1 GB below the sum; 16 - 6 free
    assert "XLA's peak 6 GB is what the verdict uses" in line and "4.1 GB below the sum" in line
    assert line.endswith("6 GB of tpu-v5e's 16 GB HBM: fits, 10 GB free")
    no_peak = fit_line(memory_fit({"temporaries": 20e9}, chip_entry("tpu-v5e")), "tpu-v5e")
    assert "the verdict uses the sum" in no_peak and no_peak.endswith("does NOT fit, 4 GB over")


def test_the_flops_cross_check_leads_with_loop_bodies_once():
    aot_ = SimpleNamespace(topology="v5p:4x4x4", devices=64, cached=False, compiler="XLA:TPU",
                           lower_s=1.0, compile_s=2.0)
    line = compile_line(aot_, {"flops_rel_diff": 64.378, "flops_loops_once_rel_diff": 0.0},
                        "8x8")
    assert line.index("loop bodies once") < line.index("+0.0%") < line.index("trip count") \
        < line.index("+6437.8%")


def _refused_compile(monkeypatch, text: str):
    real = aot.start_compile

    class Refused:
        def result(self):
            raise aot.HbmExhausted(f"XLA:TPU (libtpu 0.0.42.1) for v5e:2x2: {text}")

    def fake(*args, tpu_chip=None, **kw):
        return Refused() if tpu_chip else real(*args, tpu_chip=None, **kw)

    monkeypatch.setattr(aot, "start_compile", fake)
    monkeypatch.setattr(tpu, "libtpu_available", lambda: True)


ARGV = ["predict-hlo", "llama_train", "--mesh", "2x2", "--chip", "tpu-v5e", "--set", "B=64",
        "--set", "remat=none", "--top", "3"]


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_refused_config_says_so_first_and_prints_no_tpu_mfu(capsys, monkeypatch):
    _refused_compile(monkeypatch, _real("100m_b64_t2048_naive"))
    assert main(ARGV) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("tpu-v5e: does NOT fit: XLA:TPU (libtpu 0.0.42.1) for v5e:2x2 "
                               "refused the program: its HLO temporaries need 65.66 GiB per "
                               "chip, 15.75 GiB of HBM available (49.91 GiB over, 4.17x)")
    assert lines[2].startswith("  largest buffers (libtpu's message lists none")
    batch = next(i for i, line in enumerate(lines) if line.startswith("  batch: "))
    assert "B=14 is estimated to fit" in lines[batch]
    assert lines[batch + 1].startswith("  remat: remat=none was given")
    heading = next(i for i, line in enumerate(lines) if "NOT a TPU bound" in line)
    compiled = next(i for i, line in enumerate(lines) if "virtual CPU devices" in line)
    step = next(i for i, line in enumerate(lines) if line.startswith("step "))
    assert batch < heading < compiled < step
    # no utilisation figure anywhere (a priced chip prints mfu_at_roofline=... in its totals)
    assert not any(re.search(r"mfu\w*\s*[=:(]", line, re.I) for line in lines)
    assert sum("mfu" in line.lower() for line in lines) == 1  # "(no step, no MFU)" alone


def test_a_refused_config_in_json(capsys, monkeypatch):
    _refused_compile(monkeypatch, _real("100m_b64_t2048_naive"))
    assert main([*ARGV, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    refused = out["refused"]["tpu-v5e"]
    assert refused["required_bytes"] == pytest.approx(65.66 * GiB)
    assert refused["batch_refused"] == 64 and refused["batch_estimated_to_fit"] == 14
    assert refused["largest_buffers_xla_cpu"][0]["nbytes"] > 0
    chip = out["chips"][0]
    assert chip["compile"] == "cpu" and "NOT a TPU bound" in chip["priced_program"]
    assert schema.MFU_AT_ROOFLINE not in chip["totals"] and chip["memory_fit"]["fits"] is False
    assert not any("costing XLA:CPU" in n for n in out["notes"])


def test_plan_shows_what_libtpu_asked_for_a_refused_layout(monkeypatch):
    text = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
            "temporaries (161.32G) exceeds available HBM (95.74G).")  # docs/plan.md, 8B dp

    class Refused:
        def result(self):
            raise aot.HbmExhausted(f"XLA:TPU for v5p:4x4x4: {text}")

    monkeypatch.setattr(aot, "start_compile", lambda *a, **k: Refused())
    setting = plan_rank.Setting("llama_train", "8b", {"B": "64", "T": "256"},
                                chip_entry("tpu-v5p"), (4, 4, 4), "tpu-v5p")
    row = plan_rank.evaluate(setting, Candidate("dp", 64, 1, 3, 1), lambda line: None)
    assert row[schema.FITS] == "no" and row[schema.REQUIRED_BYTES] == pytest.approx(161.32 * GiB)
    assert row[schema.PLAN_NOTE] == ("does not fit: HLO temporaries need 161.32 GiB, 95.74 GiB "
                                     "of HBM available (libtpu)")
    assert schema.PEAK_BYTES not in row
