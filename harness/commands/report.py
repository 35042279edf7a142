"""``harness report RUN``: re-render a stored run's report (terminal, md, html, json, csv)."""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import count
from harness.runs import store
from harness.runs.run import Run


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, or run id (prefix) under --root")
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--format", choices=schema.REPORT_FORMATS, default="text")
    p.add_argument("--top", type=count, default=20, help="op rows in the terminal table")


def main(args) -> int:
    run = Run.load(store.resolve(args.run, args.root))
    print(run.render(args.format, top=args.top if args.format == "text" else None), end="")
    return 0
