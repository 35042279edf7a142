"""``harness list``: the stored runs under a results directory, oldest first."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.report import tables
from harness.runs import store


def add_arguments(p) -> None:
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")


def runs_table(root: Path) -> pd.DataFrame:
    rows = []
    for run in store.list_runs(root):
        m, s = run.meta, run.meta.get("summary", {})
        rows.append({"run": run.run_id, "workload": m.get("workload", ""),
                     "preset": m.get("preset", ""), "mesh": "x".join(
                         str(v) for v in (m.get("mesh") or {}).values()),
                     "chip": m.get("chip", ""), "step_s": s.get("step_s"),
                     "coverage": s.get("coverage"), "time": m.get("time", "")})
    return pd.DataFrame(rows)


def main(args) -> int:
    table = runs_table(args.root)
    if table.empty:
        print(f"no runs under {args.root}/")
        return 0
    print(tables.render(table, args.format), end="")
    return 0
