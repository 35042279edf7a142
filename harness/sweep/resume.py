"""Where a sweep runs and what is left of it (``harness sweep``): a new sweep directory, the
newest of its name under a root, or one given to resume; and the table of its points with
their statuses from the manifest (``--dry-run``)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.sweep import run as sweep
from harness.sweep.grid import SweepGrid

LATEST = "latest"  # --resume without a directory: the newest sweep of this name


def sweep_dir(grid: SweepGrid, out: Path, resume: str | None = None) -> Path:
    """The directory ``grid`` runs in: a new one under ``out`` (``resume`` None), the newest
    of its name there (``LATEST``), or the directory ``resume`` names, which must hold a
    sweep of the same name."""
    if resume is None:
        return sweep.new_sweep_dir(grid.name, out)
    if resume == LATEST:
        return sweep.latest_sweep(grid.name, out)
    path = Path(resume)
    name = sweep.read_manifest(path).get("name")  # one-line error unless a sweep directory
    if name != grid.name:
        raise HarnessError(f"{path} holds sweep {name!r}, not {grid.name!r}; resume it with "
                           f"its own file")
    return path


def statuses(sweep_dir: Path) -> dict[str, str]:
    """Each point's status in the manifest of ``sweep_dir`` (point key -> status)."""
    manifest = sweep.read_manifest(sweep_dir)
    return {r.get("key"): r.get("status") for r in manifest["points"]}


def points_table(grid: SweepGrid, statuses: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per point of ``grid``: what it runs, and with ``statuses`` where it stands."""
    rows = [{schema.POINT: i + 1, schema.WORKLOAD: p.workload, schema.PRESET: p.preset,
             schema.MESH: p.mesh, schema.CHIP: p.chip or "(device's)",
             schema.OVERRIDES: p.settings, schema.STEPS: p.steps, schema.WARMUP: p.warmup,
             schema.KEY: p.key} for i, p in enumerate(grid.points)]
    df = pd.DataFrame(rows)
    if statuses is not None:
        df[schema.STATUS] = [statuses.get(p.key, "pending") for p in grid.points]
    return df
