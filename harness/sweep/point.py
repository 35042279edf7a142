"""One point of a sweep run on this host: its workload run and stored under a directory, the
report beside it (``harness.runs.workload.run_workload``). The sweep (``harness.sweep.run``) and
its repeats in fresh processes (``harness.sweep.repeat``) both run points this way."""
from __future__ import annotations

from pathlib import Path

from harness.record import Run
from harness.runs.workload import run_workload
from harness.sweep.grid import Point


def run_point(point: Point, out: Path, point_plots: bool = True) -> Run:
    """Run one point on this host and store it under ``out``: the point's ``Run``."""
    return run_workload(point.workload, preset=point.preset, overrides=dict(point.overrides),
                        mesh=point.mesh, steps=point.steps, warmup=point.warmup, out=out,
                        chip=point.chip, with_plots=point_plots)
