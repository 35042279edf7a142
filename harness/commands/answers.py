"""How ``harness predict`` prints an answer (``harness.plan.book.Answer``): a rich table, Markdown,
CSV or JSON; and how it reads a number given to a flag. Shared by its questions
(``harness.commands.predict``, ``harness.commands.predict_serve``)."""
from __future__ import annotations

import csv
import io

from rich.console import Console
from rich.table import Table

from harness.units import json_text


def num(name: str, text: str | None, integer: bool = False) -> float | int | None:
    """'15e12' -> 1.5e13; ValueError names the flag (argparse's own errors print usage too)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--{name} must be a number, got {text!r}") from None
    if integer:
        if value != int(value):
            raise ValueError(f"--{name} must be a whole number, got {text!r}")
        return int(value)
    return value


def emit(args, answer) -> int:
    if args.format == "json":
        print(json_text(answer.data, indent=2))
        return 0
    if args.format in ("md", "csv"):
        print(table_text(answer, args.format), end="")
        return 0
    table = Table(title=answer.title, title_justify="left")
    for col in answer.columns:
        table.add_column(col)
    for row in answer.rows:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:  # pipes and files: no wrapping at rich's default 80 columns
        console = Console(width=160)
    console.print(table)
    return 0


def table_text(answer, fmt: str) -> str:
    """The answer's table as Markdown (its title a heading) or CSV."""
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([answer.columns, *answer.rows])
        return out.getvalue()
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    lines = [f"**{answer.title}**", "", "| " + " | ".join(map(cell, answer.columns)) + " |",
             "|" + "|".join("---" for _ in answer.columns) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in answer.rows]
    return "\n".join(lines) + "\n"
