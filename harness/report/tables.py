"""Render a table (DataFrame) as terminal text, Markdown, CSV or JSON.

Columns are formatted by their unit suffix (``_s`` as adaptive time, ``_bytes`` as decimal
bytes), so every table in the tool reads the same way.
"""
from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence

import pandas as pd
from rich.console import Console
from rich.table import Table

from harness import schema
from harness.errors import HarnessError


def fmt_seconds(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        # compare after rounding to 3 figures, so 999.8 us shows as 1 ms, not 1e+03 us
        if abs(float(f"{x:.3g}")) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def fmt_number(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (int,)) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e6):
        return f"{int(x)}"
    return f"{x:.3g}"


def fmt_fraction(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.0%}" if abs(x) < 10 else f"{x:.3g}x"


# Columns holding a fraction of something (shown as a percentage).
FRACTIONS = frozenset(schema.FRACTIONS)


def fmt_figure(key: str, value) -> str:
    """One summary figure, formatted by its name: ``*_s`` as time, fractions (coverage, MFU,
    HFU) as percentages to a tenth, other numbers plainly, anything else as text."""
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if key.endswith("_s"):
        return fmt_seconds(value)
    if key in FRACTIONS or key.startswith("mfu"):
        return f"{value:.1%}"
    return fmt_number(value) if isinstance(value, (int, float)) else str(value)


def formatter(column: str) -> Callable[[object], str]:
    """Display formatter chosen by the column's unit suffix."""
    if column.endswith("_s"):
        return fmt_seconds
    if column in FRACTIONS:
        return fmt_fraction
    return lambda v: fmt_number(v) if isinstance(v, (int, float)) else str(v)


def _display(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({c: [formatter(c)(v) for v in df[c]] for c in df.columns})


def to_text(df: pd.DataFrame, title: str | None = None) -> str:
    """A rich table rendered to plain text (what the CLI prints)."""
    table = Table(title=title, show_lines=False)
    shown = _display(df)
    for c in shown.columns:
        table.add_column(c, justify="right" if c != shown.columns[0] else "left",
                         overflow="fold")
    for row in shown.itertuples(index=False):
        table.add_row(*row)
    buf = io.StringIO()
    Console(file=buf, width=160, force_terminal=False, color_system=None).print(table)
    return buf.getvalue()


def to_markdown(df: pd.DataFrame) -> str:
    shown = _display(df)
    lines = ["| " + " | ".join(shown.columns) + " |",
             "|" + "|".join("---" for _ in shown.columns) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |"
              for row in shown.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False)


def to_json(df: pd.DataFrame) -> str:
    return json.dumps(json.loads(df.to_json(orient="records")), indent=1) + "\n"


FORMATS: dict[str, Callable[[pd.DataFrame], str]] = {
    "text": to_text, "md": to_markdown, "csv": to_csv, "json": to_json,
}


def render(df: pd.DataFrame, fmt: str = "text", columns: Sequence[str] | None = None) -> str:
    if fmt not in FORMATS:
        raise HarnessError(f"unknown format {fmt!r}; choose from {sorted(FORMATS)}")
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    return FORMATS[fmt](df)
