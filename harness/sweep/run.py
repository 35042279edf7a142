"""Run a sweep: each point of a validated sweep file is one run, tracked in a manifest.

The sweep directory (``results/sweeps/<name>-<timestamp>/``) holds ``manifest.json`` (one record
per point: key, status, run, error), the runs under ``runs/<workload>-<key>/<run-id>/``, and,
once the sweep closes, the summary table, plots and ``report.html`` (``harness.sweep.report``).

The manifest is rewritten atomically (temp file + ``os.replace``) after every point, and runs
are stored atomically by ``Run.save`` (``harness.record``), so an interrupted or killed sweep
leaves only complete runs. Running a grid in a directory that already has a manifest resumes it:
done points are skipped (a complete run found in a point's directory but missing from the
manifest, i.e. a kill between the two writes, is adopted, not re-run), failed and pending points
run again, and stray ``.tmp-*`` directories left by a kill are removed first.

A point that raises (invalid mesh for the device count, out of memory, compile error, any
exception from the workload) is recorded as failed with a one-line error and the sweep goes on.
``KeyboardInterrupt`` stops the sweep, leaving the current point pending.
"""
from __future__ import annotations

import datetime as _dt
import gc
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.capture.memory import OutOfMemory
from harness.errors import HarnessError
from harness.record import store
from harness.report.plots import drawing_time
from harness.sweep import repeat as repeat_runs
from harness.sweep import report as sweep_report
from harness.sweep.grid import Point, SweepGrid
from harness.sweep.point import run_point
from harness.units import json_text

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
RUNS = "runs"
PENDING, DONE, FAILED, OOM = "pending", "done", "failed", "oom"
VERSION = 1
DEFAULT_ROOT = Path("results") / "sweeps"


@dataclass
class Event:
    """What the progress callback gets: ``kind`` is "start", "skip", "done" or "failed"."""

    kind: str
    index: int          # 0-based position in the grid
    total: int
    point: Point
    record: dict


@dataclass
class SweepResult:
    path: Path
    records: list[dict]                 # one per grid point, in grid order
    summary: object = None              # pandas DataFrame (harness.sweep.report)
    report: Path | None = None
    ran: int = 0                        # points run in this invocation (not skipped)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r["status"] in (FAILED, OOM)]


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temp file beside ``path``, fsync it, and rename it over ``path``."""
    tmp = path.with_name(f"{store.TMP_PREFIX}{path.name}-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(json_text(obj, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_sweep_dir(name: str, root: str | os.PathLike = DEFAULT_ROOT) -> Path:
    """``root/<name>-<YYYYmmdd-HHMMSS>`` (with a suffix if that exists already)."""
    base = Path(root) / f"{name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def read_manifest(sweep_dir: str | os.PathLike) -> dict:
    p = Path(sweep_dir) / MANIFEST
    if not p.is_file():
        raise HarnessError(f"{sweep_dir}: not a sweep directory (no {MANIFEST})")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise HarnessError(f"{p}: corrupt JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise HarnessError(f"{p}: not a sweep manifest (no points list)")
    return data


def latest_sweep(name: str, root: str | os.PathLike = DEFAULT_ROOT) -> Path:
    """The newest sweep directory of sweep ``name`` under ``root`` (for ``--resume``)."""
    found = []
    for d in Path(root).glob(f"{name}-*"):
        if (d / MANIFEST).is_file():
            try:
                m = read_manifest(d)
            except HarnessError as e:
                log.warning("skipping %s", e)
                continue
            if m.get("name") == name:
                found.append((m.get("created", ""), d.name, d))
    if not found:
        raise HarnessError(f"no sweep named {name!r} under {root}/ to resume; "
                           f"run without --resume to start one")
    return max(found)[2]


def point_dir(sweep_dir: Path, point: Point) -> Path:
    return sweep_dir / RUNS / f"{point.workload}-{point.key}"


def _record(point: Point, index: int) -> dict:
    return {"key": point.key, "index": index, "label": point.label, **point.identity(),
            "status": PENDING, "run": None, "error": None, "seconds": None, "plot_seconds": None,
            "finished": None}


def _complete_runs(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(d for d in directory.iterdir()
                  if d.is_dir() and not d.name.startswith(store.TMP_PREFIX)
                  and (d / store.META).is_file())


def clean_stale(sweep_dir: Path) -> list[Path]:
    """Remove ``.tmp-*`` leftovers of a killed sweep: run/capture scratch and manifest temps."""
    stale = [*(sweep_dir / RUNS).glob(f"*/{store.TMP_PREFIX}*"),
             *sweep_dir.glob(f"{store.TMP_PREFIX}*")]
    for p in stale:
        log.info("removing stale %s", p)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return stale


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = str(exc).strip().splitlines()
    msg = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


class Manifest:
    """The sweep's state on disk: header fields and a record per point key."""

    def __init__(self, sweep_dir: Path, grid: SweepGrid):
        self.path = sweep_dir / MANIFEST
        self.data = read_manifest(sweep_dir) if self.path.exists() else {}
        if self.data and self.data.get("name") != grid.name:
            raise HarnessError(f"{sweep_dir} holds sweep {self.data.get('name')!r}, not "
                               f"{grid.name!r}; resume it with its own file")
        old = {r["key"]: r for r in self.data.get("points", []) if isinstance(r, dict)
               and r.get("key")}
        self.records = [dict(old.get(p.key) or _record(p, i), index=i, label=p.label)
                        for i, p in enumerate(grid.points)]
        # points of an earlier version of the file are kept, after the current ones
        keys = {p.key for p in grid.points}
        self.extra = [r for k, r in old.items() if k not in keys]
        self.data = {"version": VERSION, "name": grid.name, "file": str(grid.path.resolve()),
                     "created": self.data.get("created") or _now(), "updated": _now(),
                     "description": grid.description, "source": grid.text}

    def save(self) -> None:
        self.data["updated"] = _now()
        write_json_atomic(self.path, dict(self.data, points=self.records + self.extra))


def run_sweep(grid: SweepGrid, sweep_dir: str | os.PathLike, *,
              on_event: Callable[[Event], None] | None = None, close: bool = True,
              point_plots: bool = True, runner: Callable | None = None,
              on_todo: Callable[[list[int]], None] | None = None,
              repeat: int = 1) -> SweepResult:
    """Run (or resume) ``grid`` in ``sweep_dir``; returns the records and, with ``close``, the
    summary table and report path. Point failures are recorded, not raised. Each point's page
    gets its plots (``point_plots``; their drawing time is each record's ``plot_seconds``, out
    of its ``seconds``); the sweep's own plots are drawn once, at the close.
    ``runner(point, out, point_plots) -> Run`` runs one point (default ``run_point``: on this
    host; a multi-process sweep runs it across the job); ``on_todo`` gets the indices of the
    points about to run, before the first runs (a multi-process sweep tells the others).
    ``repeat`` > 1: each point run that many times, each in a fresh process, interleaved
    (``harness.sweep.repeat``); a point is done with that many runs."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    clean_stale(sweep_dir)
    manifest = Manifest(sweep_dir, grid)
    manifest.save()
    emit = on_event or (lambda e: None)
    if repeat > 1 and runner is not None:
        raise HarnessError("--repeat runs each point in a fresh process on this host; it does "
                           "not run across a multi-process job")
    total, todo = len(grid.points), {}
    for i, (point, rec) in enumerate(zip(grid.points, manifest.records)):
        runs = _complete_runs(point_dir(sweep_dir, point))
        if runs:  # done, or finished but killed before the manifest said so
            if rec["status"] != DONE or rec["run"] != str(runs[-1].relative_to(sweep_dir)):
                rec.update(status=DONE, error=None, run=str(runs[-1].relative_to(sweep_dir)),
                           finished=rec.get("finished") or _now())
                manifest.save()
            if len(runs) > repeat:
                log.warning("point %s has %d stored runs; using the newest", point.key, len(runs))
            if len(runs) >= repeat:
                emit(Event("skip", i, total, point, rec))
                continue
        elif rec["status"] == DONE:
            log.warning("point %s: its run is gone; running it again", point.label)
        todo[i] = list(range(len(runs), repeat))
    if on_todo is not None:
        on_todo(sorted(todo))
    for i, index in (repeat_runs.order(todo) if repeat > 1 else [(i, 0) for i in todo]):
        _one(grid.points[i], manifest.records[i], i, total, sweep_dir, manifest, emit,
             lambda p, out, plots, k=index: (repeat_runs.fresh(p, out, plots, k) if repeat > 1
                                             else (runner or run_point)(p, out, plots)),
             point_plots)
    result = SweepResult(path=sweep_dir, records=manifest.records, ran=len(todo))
    if close:
        result.summary, result.report = sweep_report.write(sweep_dir, manifest.data,
                                                           manifest.records)
    return result


def _one(point: Point, rec: dict, i: int, total: int, sweep_dir: Path, manifest: Manifest,
         emit: Callable, runner: Callable, point_plots: bool) -> None:
    """Run one point (or one repeat of it) and record it in the manifest."""
    rec.update(status=PENDING, run=None, error=None)
    emit(Event("start", i, total, point, rec))
    t0 = time.perf_counter()
    try:
        with drawing_time() as drawing:
            run = runner(point, point_dir(sweep_dir, point), point_plots)
    except Exception as e:  # any point failure is recorded and the sweep goes on
        log.debug("point %s failed", point.label, exc_info=True)
        rec.update(status=OOM if isinstance(e, OutOfMemory) else FAILED, error=one_line(e))
    else:
        rec.update(status=DONE, run=str(Path(run.path).relative_to(sweep_dir)))
    rec.update(seconds=round(time.perf_counter() - t0, 3),
               plot_seconds=round(drawing.seconds, 3), finished=_now())
    manifest.save()
    emit(Event(rec["status"], i, total, point, rec))
    _release()


def _release() -> None:
    """Drop the finished point's compiled programs before the next one; collect garbage (about
    0.1 s) only when memory is short (``memory_short``)."""
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    if memory_short():
        gc.collect()


def memory_short(fraction: float = 0.25, meminfo: Path = Path("/proc/meminfo")) -> bool:
    """True when less than ``fraction`` of the host's memory is available (or when the host
    does not say: then collecting is the safe choice)."""
    try:
        info = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
        available = int(info["MemAvailable"].split()[0])
        total = int(info["MemTotal"].split()[0])
    except (OSError, KeyError, ValueError):
        return True
    return available < fraction * total
