"""``harness list``: every stored run under a results directory (sweeps' and pytest
``--harness-save`` directories' included), oldest first, with the code and config it ran."""
from __future__ import annotations

from pathlib import Path

from harness.report import tables
from harness.runs.run import runs_table


def add_arguments(p) -> None:
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")


def main(args) -> int:
    table = runs_table(args.root)
    if table.empty:
        print(f"no runs under {args.root}/")
        return 0
    print(tables.render(table, args.format), end="")
    return 0
