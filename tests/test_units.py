"""harness.units: bytes, seconds and rates as text, sizes read back; expected values by hand."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import units
from harness.errors import HarnessError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40


@pytest.mark.parametrize("n, text", [
    (1536, "1.50 KiB"),                    # 1536 / 1024 = 1.5
    (16 * GiB, "16.00 GiB"),
    (512 * MiB, "512.00 MiB"),             # under 1 GiB: MiB, two decimals like every unit
    (3 * TiB // 2, "1.50 TiB"),
    (1018, "1018 B"),                      # 1018 / 1024 = 0.994: "0.99 KiB" would be under 1
    (1023, "1.00 KiB"),                    # 1023 / 1024 = 0.999 shows as 1.00
    (0, "0 B"),
    (GiB - 1, "1.00 GiB"),                 # 0.999999999 GiB shows as 1.00: the unit is GiB
    (-3 * GiB // 2, "-1.50 GiB"),          # headroom below zero: the unit by |n|
])
def test_fmt_bytes_binary_two_decimals(n, text):
    assert units.fmt_bytes(n) == text


def test_fmt_bytes_whole_units_name_a_device_as_its_data_sheet():
    # an MI300X's planes: 192 GiB less 16 MiB = 206158430208 - 16777216
    assert units.fmt_bytes(192 * GiB - 16 * MiB, decimals=0) == "192 GiB"
    assert units.fmt_bytes(24 * GiB, decimals=0) == "24 GiB"


@pytest.mark.parametrize("n, text", [
    (4.1e9, "4.1 GB"), (6e9, "6 GB"), (512, "512 B"), (0, "0 B"),
    (999.6e6, "1 GB"),                     # 0.9996 GB to three figures is 1 GB
    (1.5e12, "1.5 TB"), (34e3, "34 kB"),
])
def test_fmt_decimal_bytes_is_the_books_gb(n, text):
    assert units.fmt_decimal_bytes(n) == text


@pytest.mark.parametrize("x, text", [
    (3e-9, "3 ns"), (999.4e-9, "999 ns"), (1.5e-6, "1.5 us"),
    (999.8e-6, "1 ms"),                    # 0.9998 ms to three figures is 1 ms, not 1e+03 us
    (0.25, "250 ms"), (2.0, "2 s"), (566.7e-6, "567 us"),
    (3.86e6, "44.7 days"),                 # 3.86e6 / 86400 = 44.68
    (0, "0 ns"), (None, "-"), (math.nan, "-"),
])
def test_fmt_seconds_across_unit_boundaries(x, text):
    assert units.fmt_seconds(x) == text


@pytest.mark.parametrize("x, unit, text", [
    (3.35e12, "B/s", "3.35 TB/s"),         # H100 HBM
    (989e12, "FLOP/s", "989 TFLOP/s"),     # H100 bf16 dense
    (1.979e15, "FLOP/s", "1.98 PFLOP/s"),
    (999.8e9, "FLOP/s", "1 TFLOP/s"),      # rounded before the prefix is chosen
    (6.3e24, "FLOP", "6.3 YFLOP"),         # applied-training.md's LLaMA-3 70B
    (4.5e10, "B/s", "45 GB/s"),
    (8.03e9, "", "8.03G"),                 # no unit, no space
    (512, "B", "512 B"), (0, "", "0"), (1e-4, "", "1e-04"), (0.5, "", "0.5"),
])
def test_fmt_si_prefixes(x, unit, text):
    assert units.fmt_si(x, unit) == text


@pytest.mark.parametrize("x, text", [
    (4096, "4K"), (MiB, "1M"), (8 * MiB, "8M"), (65.66 * GiB, "65.7G"), (512, "512"),
])
def test_fmt_binary_letters(x, text):
    assert units.fmt_binary(x) == text


@pytest.mark.parametrize("text, n", [
    ("16GiB", 16 * GiB), ("16 GiB", 16 * GiB), ("1.5 kib", 1536), ("1000", 1000),
    ("512MB", 512 * 10**6), ("2 kB", 2000), ("3tb", 3 * 10**12),
    # libtpu's refusal: "available HBM (15.75G)", its G binary: a 16 GiB v5e less 1/4 GiB
    ("15.75G", 16 * GiB - GiB // 4), ("65.66G", 65.66 * GiB), ("1T", TiB), ("4K", 4096),
    (".5M", MiB // 2), ("7B", 7), (" 8 b ", 8),
])
def test_parse_bytes(text, n):
    assert units.parse_bytes(text) == pytest.approx(n, rel=1e-15)


@pytest.mark.parametrize("n", [1536, 3 * GiB // 2, 5 * TiB, 512 * MiB, 100, 7 * GiB + 3 * MiB])
def test_binary_round_trip_within_the_shown_decimals(n):
    unit, scale = units.scale_of(n, units.BINARY_BYTES, ".2f")
    assert abs(units.parse_bytes(units.fmt_bytes(n)) - n) <= 0.005 * scale


@pytest.mark.parametrize("n", [4.1e9, 34e3, 2.5e12, 126e9])
def test_decimal_round_trip(n):
    assert units.parse_bytes(units.fmt_decimal_bytes(n)) == pytest.approx(n, rel=1e-12)


@pytest.mark.parametrize("n", [4096, 8 * MiB, 64 * GiB, 2 * TiB])
def test_libtpu_letters_round_trip(n):
    assert units.parse_bytes(units.fmt_binary(n)) == n


@pytest.mark.parametrize("bad", ["lots", "16 GiBs", "16 Gb/s", "1.2.3G", "", "G", "-1GiB"])
def test_a_bad_size_names_the_units(bad):
    with pytest.raises(units.UnitError) as e:
        units.parse_bytes(bad)
    assert isinstance(e.value, HarnessError) and isinstance(e.value, ValueError)
    message = str(e.value)
    assert repr(bad) in message and "\n" not in message
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB", "TB", "G (= GiB)"):
        assert unit in message.split("units: ")[1].split(", ")


def test_scale_of_rounds_before_it_chooses():
    assert units.scale_of(999.8e-6, units.TIME_UNITS, ".3g") == ("ms", 1e-3)
    assert units.scale_of(999.8e-6, units.TIME_UNITS) == ("us", 1e-6)
    assert units.scale_of(0.5, units.BINARY_BYTES) == ("B", 1)   # nothing reached: the last


def test_importing_units_imports_no_jax_numpy_or_pandas():
    root = Path(__file__).resolve().parents[1]
    code = ("import sys, harness.units; "
            "print(sorted(m for m in ('jax', 'numpy', 'pandas') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("x, text", [
    (-2.84e-14, "0 ns"),   # 3.14 s of communication less 3.14 s exposed: float error, not time
    (2.84e-14, "0 ns"), (-0.0, "0 ns"),
    (-1e-12, "0 ns"),      # a picosecond: TIME_FLOOR_S, still below what anything resolves
    (-2e-9, "-2 ns"),      # a real negative time (a gap below the roofline) keeps its sign
    (-4.81e-3, "-4.81 ms"),
])
def test_fmt_seconds_prints_no_negative_zero(x, text):
    assert units.fmt_seconds(x) == text


def test_fmt_si_prints_no_negative_zero():
    assert units.fmt_si(-0.0) == "0" and units.fmt_si(-0.0, "B/s") == "0 B/s"
    assert units.fmt_si(-2e3, "B") == "-2 kB"
