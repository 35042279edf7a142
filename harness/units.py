"""Units: bytes, seconds, FLOPs, FLOP/s and other rates as text, and byte sizes read back.

One convention for each, used by every stage (standard library only, so any module may import it
without pulling in jax, numpy or pandas):

- a unit is the largest one the value reaches 1 in *as shown*: rounded to the digits printed
  first, so 999.8 us prints "1 ms", not "1e+03 us";
- bytes in binary units with two decimals: 1536 -> "1.50 KiB", 16 * 2**30 -> "16.00 GiB"
  (``fmt_bytes``); the book's decimal bytes (1 GB = 1e9 bytes) to three significant figures:
  "4.1 GB" (``fmt_decimal_bytes``);
- seconds to three significant figures in days, s, ms, us or ns: 1.5e-6 -> "1.5 us"
  (``fmt_seconds``); a time under ``TIME_FLOOR_S`` is float error and reads "0 ns";
- no figure reads as a negative zero ("-0", "-2.84e-05 ns"): a zero is printed unsigned;
- counts, FLOPs and rates with SI prefixes to three significant figures, a space only before a
  unit: 3.35e12 B/s -> "3.35 TB/s", 8.03e9 -> "8.03G" (``fmt_si``); sizes with binary prefix
  letters, as libtpu prints them: 4096 -> "4K" (``fmt_binary``);
- ``parse_bytes`` reads "16 GiB", "512MB", "1000" and libtpu's "65.66G": a lone K, M, G or T is
  binary (libtpu 0.0.42.1 says a 16 GiB v5e offers "15.75G"), a unit ending in B without an i is
  decimal;
- JSON is strict (RFC 8259, which has no NaN or Infinity: ``JSON.parse`` rejects them): a figure
  that does not apply is ``null`` (``json_text``), in every JSON the tool prints or writes.
"""
from __future__ import annotations

import json
import math
import re

from harness.errors import HarnessError

# Binary prefix letters, largest first: libtpu's sizes ("65.66G") and message sizes ("4K").
BINARY_PREFIXES: tuple[tuple[str, int], ...] = (
    ("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))
# SI prefixes, largest first (counts, FLOPs, FLOP/s, B/s).
SI_PREFIXES: tuple[tuple[str, float], ...] = (
    ("Y", 1e24), ("Z", 1e21), ("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6),
    ("k", 1e3))
BINARY_BYTES: tuple[tuple[str, int], ...] = (
    *((f"{p}iB", scale) for p, scale in BINARY_PREFIXES), ("B", 1))
DECIMAL_BYTES: tuple[tuple[str, int], ...] = (
    ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3), ("B", 1))
TIME_UNITS: tuple[tuple[str, float], ...] = (
    ("days", 86400.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
# A time below a picosecond, a thousandth of the smallest unit shown, is no duration a trace or a
# roofline resolves but what float subtraction leaves (3.14 s of communication less 3.14 s
# exposed: -2.84e-14 s); it reads 0.
TIME_FLOOR_S = 1e-12

# What ``parse_bytes`` reads after a number, any case; "" is bytes.
BYTE_SUFFIXES: dict[str, int] = {
    "": 1,
    **{u.lower(): scale for u, scale in BINARY_BYTES},
    **{p.lower(): scale for p, scale in BINARY_PREFIXES},
    **{u.lower(): scale for u, scale in DECIMAL_BYTES},
}
# The units it names when a size is not one: as they are usually written.
BYTE_UNIT_NAMES = ", ".join([*(u for u, _ in BINARY_BYTES), *(u for u, _ in DECIMAL_BYTES[:-1]),
                             *(f"{p} (= {p}iB)" for p, _ in BINARY_PREFIXES)])
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


class UnitError(HarnessError, ValueError):
    """A size whose unit is not one ``parse_bytes`` knows (the message names those it does)."""


def _missing(x) -> bool:
    """None, NaN, or a value that is no number (pandas' NA)."""
    if x is None:
        return True
    try:
        return math.isnan(x)
    except TypeError:
        return True


def unsigned_zero(x: float, floor: float = 0.0) -> float:
    """``x``, or 0.0 (never -0.0) where ``|x|`` is below ``floor`` or is zero."""
    return 0.0 if abs(x) <= floor else x


def scale_of(x: float, units, spec: str = "") -> tuple[str, float]:
    """The largest ``(name, scale)`` of ``units`` (largest first) that ``|x|`` reaches 1 in once
    ``x / scale`` is formatted with ``spec`` (".3g": 999.8e-6 s reaches 1 ms), else the last."""
    for name, scale in units:
        if float(format(abs(x) / scale, spec)) >= 1:
            return name, scale
    return units[-1]


def fmt_bytes(n: float, decimals: int = 2) -> str:
    """Bytes in the largest binary unit they reach 1 in: 1536 -> "1.50 KiB", under 1 KiB whole
    bytes ("512 B"). ``decimals=0`` rounds as a device's data sheet names it ("192 GiB")."""
    unit, scale = scale_of(n, BINARY_BYTES, f".{decimals}f")
    return f"{n / scale:.{decimals}f} {unit}" if scale > 1 else f"{int(n)} B"


def fmt_seconds(x: float) -> str:
    """Seconds, three significant figures: 1.5e-6 -> "1.5 us", 999.8e-6 -> "1 ms"; "-" for a
    missing value (None, NaN)."""
    if _missing(x):
        return "-"
    x = unsigned_zero(float(x), TIME_FLOOR_S)
    unit, scale = scale_of(x, TIME_UNITS, ".3g")
    return f"{x / scale:.3g} {unit}"


def fmt_si(x: float, unit: str = "") -> str:
    """``x`` with an SI prefix, three significant figures: 3.35e12, "B/s" -> "3.35 TB/s";
    without a unit no space: 8.03e9 -> "8.03G". Under 1000 plainly ("512 B"), under 1e-3 as a
    power of ten ("1e-04": axes of intensity have no milli-FLOPs)."""
    space = " " if unit else ""
    x = unsigned_zero(x)
    prefix, scale = scale_of(x, (*SI_PREFIXES, ("", 1.0)), ".3g")
    if scale > 1:
        return f"{x / scale:.3g}{space}{prefix}{unit}"
    return f"{x:.3g}{space}{unit}" if abs(x) >= 1e-3 or x == 0 else f"{x:.0e}{space}{unit}"


def fmt_decimal_bytes(n: float) -> str:
    """Bytes in the book's decimal units (1 GB = 1e9 bytes), as ``fmt_si`` gives them:
    4.1e9 -> "4.1 GB", 512 -> "512 B"."""
    return fmt_si(n, "B")


def fmt_binary(x: float) -> str:
    """``x`` with a binary prefix letter and no unit, three significant figures, as libtpu prints
    sizes: 4096 -> "4K", 65.66 * 2**30 -> "65.7G"; under 1024 plainly."""
    prefix, scale = scale_of(x, (*BINARY_PREFIXES, ("", 1)), ".3g")
    return f"{x / scale:.3g}{prefix}"


def parse_bytes(text: str) -> float:
    """A size -> bytes: "16GiB" -> 16 * 2**30, "512 MB" -> 512e6, libtpu's "65.66G" ->
    65.66 * 2**30, "1000" -> 1000. ``UnitError`` names the units it knows."""
    m = _SIZE.fullmatch(str(text))
    if m is None or m.group(2).lower() not in BYTE_SUFFIXES:
        raise UnitError(f"{text!r} is not a size like 16GiB, 512MB or 1000; units: "
                        f"{BYTE_UNIT_NAMES}")
    return float(m.group(1)) * BYTE_SUFFIXES[m.group(2).lower()]


def jsonable(obj):
    """``obj`` as plain JSON values: NaN and infinities as None (JSON's null), numpy scalars and
    arrays as numbers and lists, tuples as lists, keys that are no JSON key as text, anything
    else as its text (``str``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int)):  # bool is an int
        return obj
    if isinstance(obj, dict):
        return {(k if k is None or isinstance(k, (str, int, float)) else str(k)): jsonable(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    for to_plain in ("tolist", "item"):  # numpy arrays and scalars, without importing numpy
        if callable(getattr(obj, to_plain, None)):
            try:
                return jsonable(getattr(obj, to_plain)())
            except (TypeError, ValueError):
                break
    return str(obj)


def json_text(obj, indent: int | None = 1, **options) -> str:
    """``obj`` as strict JSON text (``jsonable``; ``json.dumps`` with ``allow_nan=False``, so a
    value it missed fails here, not in the reader's parser)."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False, **options)
