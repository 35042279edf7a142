"""``harness sweep --repeat N``: each point run N times, each time in a fresh process.

Runs of the same code land in different modes from one process to the next (a CPU collective at
2.2 ms in one process and 4.6 ms in the next; thread placement), so the repeats of a point are
its replicates only when each runs in its own process: a spawned child (no state inherited from
the sweep's process, JAX's included) runs the point and stores it, then the run's meta gets its
repeat index (``schema.REPEAT``). The sweep interleaves them (every point once, then every
point again), so that a load that comes and goes falls on several points rather than on every
repeat of one. Their spread is the point's own noise (``harness.regress.noise``).
"""
from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harness import schema
from harness.record import Run, store
from harness.sweep.grid import Point
from harness.sweep.point import run_point
from harness.units import json_text


def _child(point: Point, out: str, point_plots: bool, index: int) -> str:
    """In the fresh process: run the point, store it, mark its repeat index; its path."""
    path = Path(run_point(point, Path(out), point_plots).path)
    mark(path, index)
    return str(path)


def mark(path: Path, index: int) -> None:
    """Write the repeat index into the stored run's meta (``schema.REPEAT``)."""
    meta = path / store.META
    data = json.loads(meta.read_text())
    data[schema.REPEAT] = index
    tmp = meta.with_name(f"{store.TMP_PREFIX}{meta.name}")
    tmp.write_text(json_text(data, indent=2) + "\n")
    tmp.replace(meta)


def fresh(point: Point, out: Path, point_plots: bool, index: int) -> Run:
    """Run repeat ``index`` of ``point`` in a fresh (spawned) process, stored under ``out``."""
    with ProcessPoolExecutor(max_workers=1,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        path = pool.submit(_child, point, str(out), point_plots, index).result()
    return Run.load(path)


def order(todo: dict[int, list[int]]) -> list[tuple[int, int]]:
    """(point index, repeat index) to run, interleaved: each point's first missing repeat,
    then each one's next, and so on."""
    return sorted(((i, r) for i, reps in todo.items() for r in reps), key=lambda x: (x[1], x[0]))
