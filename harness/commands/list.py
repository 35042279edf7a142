"""``harness list``: every stored run under a results directory (sweeps' and pytest
``--harness-save`` directories' included), oldest first, with the code and config it ran."""
from __future__ import annotations

from pathlib import Path

from harness.commands import add_format
from harness.record import runs_table
from harness.report import tables


def add_arguments(p) -> None:
    p.add_argument("--root", type=Path, default=Path("results"), metavar="DIR",
                   help="results directory (default results/)")
    add_format(p, tuple(tables.FORMATS))


def main(args) -> int:
    table = runs_table(args.root)
    if table.empty:
        print(f"no runs under {args.root}/")
        return 0
    print(tables.render(table, args.format), end="")
    return 0
