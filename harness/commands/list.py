"""``harness list``: the stored runs under a results directory, oldest first."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness import schema
from harness.report import tables
from harness.runs.run import list_runs


def add_arguments(p) -> None:
    p.add_argument("--root", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")


def runs_table(root: Path) -> pd.DataFrame:
    rows = []
    for run in list_runs(root):
        m, s = run.meta, run.summary
        rows.append({schema.RUN: run.run_id, schema.WORKLOAD: m.get(schema.WORKLOAD, ""),
                     schema.PRESET: m.get(schema.PRESET, ""), schema.MESH: "x".join(
                         str(v) for v in (m.get(schema.MESH) or {}).values()),
                     schema.CHIP: m.get(schema.CHIP, ""), schema.STEP_S: s.get(schema.STEP_S),
                     schema.COVERAGE: s.get(schema.COVERAGE),
                     schema.TIME: m.get(schema.TIME, "")})
    return pd.DataFrame(rows)


def main(args) -> int:
    table = runs_table(args.root)
    if table.empty:
        print(f"no runs under {args.root}/")
        return 0
    print(tables.render(table, args.format), end="")
    return 0
