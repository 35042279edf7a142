"""``harness list``: every stored run under a results directory (sweeps' and pytest
``--harness-save`` directories' included), oldest first, with the code and config it ran."""
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
        dirty = {True: "yes", False: "no"}.get(m.get(schema.GIT_DIRTY), "")
        rows.append({schema.RUN: str(run.path.relative_to(root)) if run.path != Path(root)
                     else run.run_id,
                     schema.WORKLOAD: m.get(schema.WORKLOAD) or m.get(schema.TEST) or "",
                     schema.PRESET: m.get(schema.PRESET, ""), schema.MESH: "x".join(
                         str(v) for v in (m.get(schema.MESH) or {}).values()),
                     schema.OVERRIDES: " ".join(f"{k}={v}" for k, v in
                                                (m.get(schema.OVERRIDES) or {}).items()),
                     schema.CHIP: m.get(schema.CHIP, ""),
                     schema.WALL_STEP_S: s.get(schema.WALL_STEP_S),
                     schema.GIT_SHA: m.get(schema.GIT_SHA, ""), schema.GIT_DIRTY: dirty,
                     schema.TIME: m.get(schema.TIME, "")})
    return pd.DataFrame(rows)


def main(args) -> int:
    table = runs_table(args.root)
    if table.empty:
        print(f"no runs under {args.root}/")
        return 0
    print(tables.render(table, args.format), end="")
    return 0
