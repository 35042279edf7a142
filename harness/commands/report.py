"""``harness report RUN``: re-render a stored run's report (terminal, md, html, json, csv)."""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import add_format, count
from harness.record import Run, store
from harness.report import render


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, or run id (prefix) under --root")
    p.add_argument("--root", type=Path, default=Path("results"), metavar="DIR",
                   help="results directory (default results/)")
    add_format(p, schema.REPORT_FORMATS)
    p.add_argument("--top", type=count, default=20, metavar="N",
                   help="op rows in the terminal table (default 20; 0 = all)")


def main(args) -> int:
    run = Run.load(store.resolve(args.run, args.root))
    print(render(run, args.format, top=args.top if args.format == "text" else None), end="")
    return 0
