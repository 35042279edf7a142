"""A sweep across a multi-process JAX job: every point runs on every process, stored once.

Process 0 owns the sweep: its directory, manifest and summary (``harness.sweep.run``), and it
decides which points run (a resumed sweep skips the done ones). It tells the other processes
the indices of those points through the coordination service before the first runs; each
process then runs them in that order, each point as one ``multihost.run.run_workload`` (every
process captures its own devices, process 0 merges and stores the run). A point that fails is
recorded by process 0 and the job goes on to the next, as a sweep on one host does. The other
processes write nothing under the sweep directory (they need not share a filesystem with it).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from harness.errors import one_line
from harness.multihost import run as distributed
from harness.sweep import run as sweep
from harness.sweep.grid import Point, SweepGrid

log = logging.getLogger(__name__)

TODO_KEY = f"{distributed.KEY_PREFIX}/sweep-todo"


def _run_point(point: Point, out: Path, cluster: distributed.Cluster, plots: bool = False):
    run, path = distributed.run_workload(point.workload, cluster=cluster, preset=point.preset,
                                         overrides=dict(point.overrides), mesh=point.mesh,
                                         steps=point.steps, warmup=point.warmup, out=out,
                                         chip=point.chip, plots=plots)
    return run


def lead(grid: SweepGrid, sweep_dir: Path, cluster: distributed.Cluster, **kwargs):
    """Process 0: ``sweep.run_sweep`` with every point run across the job."""
    def tell(todo: list[int]) -> None:
        distributed._client().key_value_set_bytes(TODO_KEY, json.dumps(todo).encode())

    return sweep.run_sweep(grid, sweep_dir, on_todo=tell,
                           runner=lambda point, out, plots: _run_point(point, out, cluster,
                                                                       plots), **kwargs)


def follow(grid: SweepGrid, cluster: distributed.Cluster) -> tuple[int, int]:
    """Every other process: run the points process 0 names, in its order; (points run, points
    that process 0 stored)."""
    deadline = time.monotonic() + distributed.WAIT_S
    todo = json.loads(distributed._get(TODO_KEY, deadline, "process 0 named no sweep points"))
    stored = 0
    for i in todo:
        point = grid.points[i]
        try:
            _run_point(point, Path("."), cluster)
            stored += 1
        except distributed.PeerError:
            raise  # a process is gone: the job cannot go on
        except Exception as e:  # process 0 records the failure; the job goes on
            log.warning("point %d (%s): %s", i + 1, point.label, one_line(e))
    return len(todo), stored


def finish(cluster: distributed.Cluster) -> None:
    """Every process, at the end: wait until all have finished (and said so), so that process
    0's exit code (1 when points failed) does not stop a process still reporting."""
    distributed._client().wait_at_barrier(f"{distributed.KEY_PREFIX}/sweep-done",
                                          distributed.BARRIER_MS)
