"""Render a table (DataFrame) as terminal text, Markdown, CSV or JSON.

A shown table has one unit per column, named in its header: a column's unit comes from its name
(``_s`` time, ``_bytes`` bytes, ``_GBps`` 1e9 bytes/s, ``schema.FRACTIONS`` percent,
``schema.RATIOS`` multiples) and its scale from its values (``measured (ms)`` holding 0.143 and
1.93), so every table in the tool reads the same way. A column of times or sizes that spans many
units (194 ms beside 6 ns) keeps one, the smallest its largest value reads under ``WIDE`` in
("194434" and "0.0060" us): a cell never names a unit of its own (issue 58); a column with a
unit and no value in any row is left out of the shown table (``shown``). A
fraction of a roofline above what it allows (``harness.analysis.gaps.beats_roofline``) is flagged
where it stands (``FLAG``); on a CPU chip, one above it by less than the host's spread
(``spread``, ``harness.chip.spells``) is marked within it (``WITHIN``). ``legend`` gives each
shown column's meaning from ``schema.GLOSSARY``. CSV and JSON keep the raw SI values.
"""
from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
from rich.console import Console
from rich.table import Table

from harness import schema
from harness.analysis.gaps import (
    ROOFLINE_MARGIN,
    beats_roofline,
    roof_limit,
    within_spread,
)
from harness.errors import HarnessError
from harness.units import (
    BINARY_BYTES,
    TIME_FLOOR_S,
    TIME_UNITS,
    fmt_seconds,
    json_text,
    scale_of,
    unsigned_zero,
)

FLAG = "!"  # after a figure above what the roofline allows (text and Markdown)
WITHIN = "~"  # after one above the roofline by less than the host's spread (a CPU chip's)
# A column whose largest cell would reach this in the unit its typical value chooses (194434268
# ns) reads in a larger one (194434 us), so that no cell runs past six digits before the point.
WIDE = 1e6


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA


def fmt_number(x: float) -> str:
    if _missing(x):
        return "-"
    if isinstance(x, (int,)) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e6):
        return f"{int(x)}"
    return f"{x:.3g}"


def plain(x: float, significant: int = 3) -> str:
    """``x`` to ``significant`` digits without an exponent: 1.934 -> "1.93", 0.01234 ->
    "0.0123", 1234.5 -> "1234"; a value below 1e-4 that is not 0 -> "<0.0001"."""
    if x == 0:
        return "0"
    if abs(x) < 1e-4:
        return "<0.0001" if x > 0 else ">-0.0001"
    decimals = max(0, significant - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{min(decimals, 4)}f}"


def fmt_percent(x: float) -> str:
    """A fraction as a percentage without the sign: 0.78 -> "78", 0.0038 -> "0.38"."""
    if _missing(x):
        return "-"
    pct = 100 * float(x)
    if 0 < abs(pct) < 0.01:
        return "<0.01" if pct > 0 else ">-0.01"
    return f"{pct:.0f}" if abs(pct) >= 10 else plain(pct, 2)


def fmt_figure(key: str, value) -> str:
    """One summary figure with its unit, formatted by its name: ``*_s`` as time, fractions
    (coverage, MFU, HFU) as percentages to a tenth, ratios as multiples, bandwidths in GB/s,
    other numbers plainly, anything else as text."""
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if key.endswith("_s"):
        return fmt_seconds(value)
    if key in FRACTIONS or key.startswith("mfu"):
        return f"{value:.1%}" if abs(value) >= 0.1 else f"{fmt_percent(value)}%"
    if key in RATIOS:
        return f"{value:.3g}x"
    if key.endswith("_GBps"):
        return f"{plain(value)} GB/s"
    if key.endswith("_bytes") and isinstance(value, (int, float)):
        unit, scale = scale_of(value, BINARY_BYTES)
        return f"{plain(value / scale)} {unit}"
    return fmt_number(value) if isinstance(value, (int, float)) else str(value)


# Columns holding a fraction of something (shown as a percentage) and multiples.
FRACTIONS = frozenset(schema.FRACTIONS)
RATIOS = frozenset(schema.RATIOS)


@dataclass(frozen=True)
class Column:
    """How one column is shown: its header (name and unit) and its cells' text."""

    name: str
    unit: str                          # "" for none
    fmt: Callable[[object], str]

    @property
    def base(self) -> str:
        """The name without its unit suffix: ``exposed_comm_s`` -> "exposed_comm" (the header
        says the unit; the name stays the one CSV and JSON use)."""
        for suffix in ("_s", "_bytes", "_GBps"):
            if self.name.endswith(suffix) and len(self.name) > len(suffix):
                return self.name[:-len(suffix)]
        return self.name

    @property
    def label(self) -> str:
        return f"{self.base} ({self.unit})" if self.unit else self.base

    def cell(self, value, spread: float = math.nan) -> str:
        if isinstance(value, str):
            return value
        return self.fmt(value) + mark(self.name, value, spread)


def flagged(column: str, value, spread: float = math.nan) -> bool:
    """True for a fraction of a roofline or a peak above what it allows (``spread``: the
    chip's, ``harness.analysis.gaps.roof_limit``)."""
    return column in schema.ROOFLINE_FRACTIONS and beats_roofline(value, spread)


def mark(column: str, value, spread: float = math.nan) -> str:
    """What follows a figure: ``FLAG`` above what the roofline allows, ``WITHIN`` above it by
    less than the chip's ``spread``, else nothing."""
    if column not in schema.ROOFLINE_FRACTIONS:
        return ""
    return FLAG if beats_roofline(value, spread) else WITHIN if within_spread(value, spread) \
        else ""


def _scaled(units, values: pd.Series) -> tuple[str, float]:
    """The column's unit: the largest its biggest value reaches 1 in while its typical (median
    nonzero) value stays above 0.3 (1.93 and 0.8 ms, not 1930 and 800 us), else the largest
    its typical value reaches 1 in (a column spanning 250 us to 1 s reads in ms)."""
    v = pd.to_numeric(values, errors="coerce").abs()
    v = v[(v > 0) & v.notna()]
    if not len(v):  # all zero or blank: the base unit (s, B)
        return next(u for u in units if u[1] == 1.0)
    top, typical = float(v.max()), float(v.median())
    return next(((u, s) for u, s in units if top >= s * 0.9995 and typical >= 0.3 * s),
                next(((u, s) for u, s in units if typical >= s * 0.9995), units[-1]))


def _in_unit(name: str, units, values: pd.Series, floor: float = 0.0) -> Column:
    """A column in one unit of ``units``, its header naming it: the one ``_scaled`` chooses,
    or the smallest larger one its largest value reads under ``WIDE`` in. A value within
    ``floor`` of 0 is float error: "0"."""
    unit, scale = _scaled(units, values)
    top = pd.to_numeric(values, errors="coerce").abs().max()
    larger = [(u, s) for u, s in units if s > scale]  # largest first: pop() the next one up
    while not _missing(top) and top / scale >= WIDE and larger:
        unit, scale = larger.pop()
    return Column(name, unit, lambda x: "-" if _missing(x)
                  else plain(unsigned_zero(float(x), floor) / scale))


def column(name: str, values: pd.Series) -> Column:
    """How column ``name`` holding ``values`` is shown."""
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if not numeric:
        return Column(name, "", lambda v: fmt_number(v) if isinstance(v, (int, float))
                      else ("" if _missing(v) else str(v)))
    if name.endswith("_s"):
        return _in_unit(name, TIME_UNITS, values, TIME_FLOOR_S)
    if name.endswith("_bytes"):
        return _in_unit(name, BINARY_BYTES, values)
    if name.endswith("_GBps"):
        return Column(name, "GB/s", lambda x: "-" if _missing(x) else plain(float(x)))
    if name in FRACTIONS:
        return Column(name, "%", fmt_percent)
    if name in RATIOS:
        return Column(name, "x", lambda x: "-" if _missing(x) else plain(float(x)))
    return Column(name, "", fmt_number)


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` less each column with a unit whose every row is blank (a ``predicted (s)`` of
    "-" only says nothing, in a unit no cell shows)."""
    if not len(df):
        return df
    # the unit the column's name gives it, whatever the dtype of its blanks (None: object)
    blank = [c for c in df.columns if df[c].isna().all() and column(c, pd.Series([0.0])).unit]
    return df.drop(columns=blank) if blank else df


def cells(df: pd.DataFrame, spread: float = math.nan) -> tuple[list[Column], list[list[str]]]:
    """The table as shown: its columns and each row's cell texts (``spread``: the chip's)."""
    cols = [column(c, df[c]) for c in df.columns]
    return cols, [[c.cell(v, spread) for c, v in zip(cols, row)]
                  for row in df.itertuples(index=False)]


def legend(names: Sequence[str]) -> list[tuple[str, str]]:
    """(shown name, meaning) of each column with a ``schema.GLOSSARY`` entry."""
    return [(Column(n, "", str).base, schema.GLOSSARY[n]) for n in names if n in schema.GLOSSARY]


def legend_text(names: Sequence[str], flags: bool = False, width: int | None = None,
                spread: float = math.nan) -> str:
    """The legend as one paragraph: "name: meaning; ..." (and what ``FLAG`` means; what
    ``WITHIN`` means where the chip's ``spread`` is above the margin); ``width``: wrapped to
    lines that long, indented."""
    items = [f"{k}: {v}" for k, v in legend(names)]
    if flags:
        items.append(f"{FLAG} above what the roofline allows (see the notes)")
    if within_meaning(spread):
        items.append(f"{WITHIN} {within_meaning(spread)}")
    text = "; ".join(items)
    return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="  ") if width \
        else text


def within_meaning(spread: float = math.nan) -> str:
    """What ``WITHIN`` means, with the chip's spread; "" where the spread marks nothing."""
    if roof_limit(spread) <= ROOFLINE_MARGIN:
        return ""
    return (f"above the roofline by less than the host's spread, {spread:.2f}x (its cores' "
            f"speed moved that much while it was calibrated): within it, not beating it")


def to_text(df: pd.DataFrame, title: str | None = None, width: int | None = None,
            spread: float = math.nan) -> str:
    """A rich table rendered to plain text (what the CLI prints): one line per row at its
    natural width (a log); ``width``: fit that many characters (a terminal), folding cells;
    ``spread``: the chip's (``mark``)."""
    table = Table(title=title, show_lines=False)
    df = shown(df)
    cols, rows = cells(df, spread)
    for i, c in enumerate(cols):
        text = i == 0 or not pd.api.types.is_numeric_dtype(df[c.name])
        table.add_column(c.label, justify="left" if text else "right",
                         overflow="fold", no_wrap=width is None)
    for row in rows:
        table.add_row(*row)
    buf = io.StringIO()
    Console(file=buf, width=width or 100_000, force_terminal=False, color_system=None,
            soft_wrap=width is None).print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def to_markdown(df: pd.DataFrame, spread: float = math.nan) -> str:
    cols, rows = cells(shown(df), spread)
    lines = ["| " + " | ".join(c.label for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def to_csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False)


def to_json(df: pd.DataFrame) -> str:
    return json_text(json.loads(df.to_json(orient="records")), indent=1) + "\n"


FORMATS: dict[str, Callable[[pd.DataFrame], str]] = {
    "text": to_text, "md": to_markdown, "csv": to_csv, "json": to_json,
}


def render(df: pd.DataFrame, fmt: str = "text", columns: Sequence[str] | None = None) -> str:
    if fmt not in FORMATS:
        raise HarnessError(f"unknown format {fmt!r}; choose from {sorted(FORMATS)}")
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    return FORMATS[fmt](df)
