"""``harness report RUN``: re-render a stored run's report (terminal, md, html, json, csv)."""
from __future__ import annotations

from pathlib import Path

from harness import report
from harness.commands import count
from harness.runs import store


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, or run id (prefix) under --root")
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--format", choices=sorted(report.FORMATS), default="text")
    p.add_argument("--top", type=count, default=20, help="op rows in the terminal table")


def main(args) -> int:
    r = store.load(store.resolve(args.run, args.root)).report
    print(report.to_text(r, top=args.top) if args.format == "text"
          else report.render(r, args.format), end="")
    return 0
