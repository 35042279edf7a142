"""The chip a trace ran on, from its device planes (harness.trace.device,
harness.chip.resolve): real
TPU v6e, AMD MI300X and NVIDIA H100 profiles, and synthetic planes for what they do not show."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from xspace_text import plane, serialize

from harness import schema
from harness.chip.resolve import TRACE, chip_from_device, resolve_chip
from harness.cli import main
from harness.errors import HarnessError
from harness.runs.pipeline import analyze_trace
from harness.trace.device import Device, trace_device
from harness.trace.load import find_trace_file, read_xspace
from predictions import hardware

FIXTURES = Path(__file__).parent / "fixtures"
EXTERNAL = FIXTURES / "external"
MI300X = ("mi300x-gemm", "mi300x-attention", "mi300x-conv")
H100 = sorted(p.name for p in (FIXTURES / "h100").iterdir() if p.is_dir())


@pytest.fixture
def cli(monkeypatch):
    # harness.cli.main sets XLA_FLAGS for --devices; restore it after the test
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    return main


def device_of(source) -> Device | None:
    space, _ = read_xspace(find_trace_file(source) if isinstance(source, Path) else source)
    return trace_device(space)


# --- what the real planes say -----------------------------------------------------------------
def test_tpu_v6e_plane():
    d = device_of(EXTERNAL / "tpu-v6e-inference")
    assert (d.platform, d.name, d.count) == ("tpu", "TPU v6 Lite", 4)
    # peak_teraflops_per_second 918, peak_hbm_bw_gigabytes_per_second 1637.99..., in SI units
    assert d.peak_flops_per_s == 918e12
    assert d.peak_hbm_bytes_per_s == pytest.approx(1638e9, rel=1e-3)
    assert d.vendor is None and d.compute_capability is None


@pytest.mark.parametrize("name", MI300X)
def test_mi300x_planes(name):
    d = device_of(EXTERNAL / name)
    assert (d.platform, d.vendor, d.name, d.count) == ("gpu", "AMD", None, 8)
    assert (d.compute_capability, d.core_count) == ((9, 4), 304)  # gfx942, 304 CUs
    assert d.memory_bytes == 206141652992  # 192 GiB less 16 MiB
    assert d.clock_hz == 2100e6  # clock_rate 2100000 kHz: the MI300X's peak engine clock
    assert d.label == "AMD GPU, compute capability 9.4, 304 CUs, 192 GiB"


@pytest.mark.parametrize("name", H100)
def test_h100_planes(name):
    d = device_of(FIXTURES / "h100" / name)
    assert (d.platform, d.name, d.compute_capability, d.core_count, d.count) == (
        "gpu", "NVIDIA H100 80GB HBM3", (9, 0), 132, 1)
    assert d.memory_bytes_per_s == 3.35232e12  # the 3.35 TB/s of the data sheet


def test_a_trace_without_accelerator_planes_has_no_device():
    host = serialize(plane("/host:CPU", {"python": [("step", 0, 10, {})]}))
    assert device_of(host) is None
    assert chip_from_device(None) == (None, [], {})


# --- the chip they resolve to, with no --chip ---------------------------------------------------
@pytest.mark.parametrize("folder, chip", [
    (EXTERNAL / "tpu-v6e-inference", "tpu-v6e"),
    *((EXTERNAL / n, "mi300x") for n in MI300X),
    *((FIXTURES / "h100" / n, "h100") for n in H100),
])
def test_chip_from_each_fixture(folder, chip):
    entry, notes, meta = chip_from_device(device_of(folder))
    assert entry is hardware.chip(chip)
    assert meta == {schema.CHIP_SOURCE: TRACE}
    assert notes == [f"chip {chip} from the trace's device planes ({device_of(folder).label})"]


@pytest.mark.parametrize("name, chip", [("tpu-v6e-inference", "tpu-v6e"),
                                        ("mi300x-gemm", "mi300x")])
def test_analyze_trace_records_the_chip_and_its_source(name, chip):
    run = analyze_trace(EXTERNAL / name)
    assert (run.meta[schema.CHIP], run.meta[schema.CHIP_SOURCE]) == (chip, "trace")
    assert run.meta[schema.DEVICE_KIND] == device_of(EXTERNAL / name).label
    assert f"x {run.meta[schema.DEVICE_KIND]} (predicted for {chip})" in run.title
    flagged = analyze_trace(EXTERNAL / name, chip=chip)
    assert flagged.meta[schema.CHIP_SOURCE] == "flag"
    assert not any("measured on" in n for n in flagged.notes)  # the same chip: nothing to say


# --- telling GPUs apart -------------------------------------------------------------------------
GIB = 2**30
AMD = dict(platform="gpu", vendor="AMD", count=8)


@pytest.mark.parametrize("device, chip", [
    (Device(**AMD, compute_capability=(9, 4), core_count=304, memory_bytes=192 * GIB), "mi300x"),
    (Device(**AMD, compute_capability=(9, 4), core_count=304, memory_bytes=256 * GIB), "mi325x"),
    (Device(**AMD, compute_capability=(9, 5), core_count=256, memory_bytes=288 * GIB,
            clock_hz=2.4e9), "mi355x"),
    (Device(**AMD, compute_capability=(9, 5), core_count=256, memory_bytes=288 * GIB,
            clock_hz=2.2e9), "mi350x"),
    # an NVIDIA plane without its name: compute capability 9.0, 132 SMs, 141 GB -> H200
    (Device("gpu", vendor="Nvidia", compute_capability=(9, 0), core_count=132,
            memory_bytes=140 * GIB), "h200"),
])
def test_gpu_ids(device, chip):
    assert chip_from_device(device)[0].name == chip


def test_gfx950_without_a_clock_is_not_guessed():
    d = Device(**AMD, compute_capability=(9, 5), core_count=256, memory_bytes=288 * GIB)
    entry, notes, meta = chip_from_device(d)
    assert entry is None and meta == {}
    assert "mi350x or mi355x" in notes[0] and "give --chip" in notes[0]


def test_a_partitioned_mi300x_is_not_an_mi300x():
    # CPX mode: each of 8 partitions shows 38 CUs and 24 GiB
    d = Device(**AMD, compute_capability=(9, 4), core_count=38, memory_bytes=24 * GIB)
    entry, notes, _ = chip_from_device(d)
    assert entry is None
    assert notes[0].startswith("measured only: the trace ran on AMD GPU, compute capability "
                               "9.4, 38 CUs, 24 GiB, which is not a chip the registry knows")


# --- a device the registry lacks ----------------------------------------------------------------
def tpu_plane(stats: dict) -> bytes:
    return serialize(plane("/device:TPU:0", {"XLA Ops": [("fusion.1", 0, 10, {})]},
                           stats_of_plane=stats))


def test_unknown_device_without_peaks_is_measured_only_with_a_note(tmp_path, capsys, cli):
    space = tpu_plane({"device_type_string": "TPU v2"})
    entry, notes, meta = chip_from_device(device_of(space))
    assert (entry, meta) == (None, {})
    assert notes == [f"measured only: the trace ran on TPU v2, which is not a chip the registry "
                     f"knows, and its planes give no peak FLOP/s; give --chip (one of "
                     f"{', '.join(hardware.CHIPS)})"]
    with pytest.raises(HarnessError, match="TPU v2"):
        resolve_chip(None, device_of(space))
    (tmp_path / "t.xplane.pb").write_bytes(space)
    assert cli(["trace", str(tmp_path)]) == 0
    assert f"note: {notes[0]}" in capsys.readouterr().out


def test_unknown_device_with_peaks_gets_a_chip_of_the_traces_peaks():
    space = tpu_plane({"device_type_string": "TPU v2", "peak_teraflops_per_second": 45.0,
                       "peak_hbm_bw_gigabytes_per_second": 700.0})
    entry, notes, meta = chip_from_device(device_of(space))
    assert (entry.name, entry.kind, meta) == ("TPU v2", "tpu", {schema.CHIP_SOURCE: TRACE})
    assert entry.flops_per_s("bf16") == 45e12 and entry.hbm_bytes_per_s == 700e9
    assert "peaks from the trace's device plane" in notes[0]


def test_a_real_plane_the_registry_lacks_predicts_with_its_own_peaks(monkeypatch):
    # the v6e trace, with the registry's v6e pattern gone: its 918 TFLOPS and 1638 GB/s are used
    kinds = {k: v for k, v in hardware.DEVICE_KINDS.items() if v != "tpu-v6e"}
    monkeypatch.setattr(hardware, "DEVICE_KINDS", kinds)
    run = analyze_trace(EXTERNAL / "tpu-v6e-inference")
    assert (run.chip.name, run.chip.flops_per_s("bf16")) == ("TPU v6 Lite", 918e12)
    assert run.meta[schema.CHIP_SOURCE] == "trace"
    assert any("peaks from the trace's device plane" in n for n in run.notes)


# --- --chip: the note names the trace's device, never this host ---------------------------------
def test_chip_flag_note_names_the_traces_device(capsys, cli):
    entry, notes, meta = resolve_chip("tpu-v5e", device_of(EXTERNAL / "tpu-v6e-inference"))
    assert entry.name == "tpu-v5e" and meta == {schema.CHIP_SOURCE: "flag"}
    assert notes[0].startswith("predicted for tpu-v5e but measured on TPU v6 Lite (tpu-v6e)")
    assert cli(["trace", str(EXTERNAL / "mi300x-gemm"), "--chip", "h100", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert ("note: predicted for h100 but measured on AMD GPU, compute capability 9.4, 304 CUs, "
            "192 GiB (mi300x)") in out
    assert "measured on cpu" not in out
