"""The Run: one analysed program run, in memory and on disk.

What ran (``meta``: workload and config or the user's function, mesh, chip, environment, commit,
timings), what it produced (``capture``: the trace and the program's HLO), its tables
(``harness.record.tables.Tables``: ``ops``, ``categories``, ``steps``, ``summary``, ``notes``,
...). Every entry point makes one (``harness.runs.pipeline``); ``Run.save(dir)`` stores its data
atomically as ``results/<run-id>/`` (with the files it is given: the report a command stores,
``harness.report.files``), ``Run.load(dir)`` reads it back; ``harness.report.render(run, fmt)``
renders it.

On disk (``FORMAT`` in meta.json; a run saved before the key existed is format 1, which has the
same files): meta.json (meta, title, summary, notes, cross-check, step), ops.parquet and ops.csv,
steps.parquet, collectives.parquet (every collective explained, where any ran), categories.csv,
programs.csv, unexpected_collectives.csv and ``trace/``; a run saved for a user has its report
beside them (report.md, report.html, the PNG plots).
"""
from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.record import store
from harness.record.tables import Tables
from predictions.mesh import mesh_label

log = logging.getLogger(__name__)

FORMAT = 3          # 1: runs saved before the key existed (same files); 2: the one Run;
#                     3: the step object, and the summary's untraced wall time named wall_step_s
FORMAT_KEY = "format"
OPS_PARQUET = "ops.parquet"
OPS_CSV = "ops.csv"
STEPS_PARQUET = "steps.parquet"
CATEGORIES_CSV = "categories.csv"
UNEXPECTED_CSV = "unexpected_collectives.csv"
PROGRAMS_CSV = "programs.csv"
COLLECTIVES_PARQUET = "collectives.parquet"  # schema.COLLECTIVES (harness.explain)
# meta.json keys that are the run's report rather than its metadata
_REPORT_KEYS = (schema.TITLE, schema.SUMMARY, schema.NOTES, schema.CROSS_CHECK, FORMAT_KEY,
                schema.STEP_OBJECT)
# meta.json fields that, when present, must have these JSON types (a hand-edited file may not).
META_TYPES: dict[str, type | tuple[type, ...]] = {
    schema.SUMMARY: dict, schema.MESH: dict, schema.CONFIG: dict, schema.OVERRIDES: dict,
    schema.NOTES: list, schema.CROSS_CHECK: dict, schema.WORKLOAD: str, schema.PRESET: str,
    schema.TITLE: str, schema.STEP_OBJECT: dict,
}


@dataclass
class Run(Tables):
    """One analysed run: its tables and what ran. ``chip`` (the ``predictions.hardware.Chip``
    it was predicted for), ``capture`` (``harness.capture.steps.Capture``: trace directory,
    HLO, cost) and ``trace`` (``harness.trace.TraceEvents``: EVENTS, format, async names) are
    what a fresh run was made from; a loaded run has its trace on disk instead. ``plots``: the
    report's PNGs by file name, once drawn (``harness.report.drawn.plots``). ``modules``: a
    fresh run's parsed HLO, (program, program id) -> ``harness.hlo.Module`` of each program
    that ran, as the analysis parsed it (not saved: a loaded run's is empty)."""

    title: str = ""
    chip: object | None = None
    capture: object | None = None
    trace: object | None = None
    plots: dict[str, bytes] = field(default_factory=dict)
    path: Path | None = None
    modules: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, tables: Tables, **more) -> Run:
        """The Run of an analysis's ``tables`` (each as it is), with ``more`` of its fields."""
        return cls(**{**{f.name: getattr(tables, f.name) for f in fields(Tables)}, **more})

    @property
    def events(self) -> pd.DataFrame | None:
        """The EVENTS the run was analysed from (a fresh run's only)."""
        return self.trace.events if self.trace is not None else None

    @property
    def name(self) -> str:
        """The name the run is stored under (its folder's; "" before it is stored)."""
        return self.path.name if self.path is not None else ""

    @property
    def run_id(self) -> str:
        """Deprecated (one release): ``name``. ``run_id`` is XLA's execution id (the trace's
        stat); a stored run's folder is its ``name``."""
        warnings.warn("Run.run_id is deprecated: use Run.name", DeprecationWarning, stacklevel=2)
        return self.name

    def save(self, path: str | os.PathLike, *,
             files: Callable[[Run], Mapping[str, str | bytes]] | None = None) -> Path:
        """Store the run's data atomically at ``path`` (which must not exist); its capture's
        trace directory moves into the run's ``trace/``, and a trace path in its meta points
        there. ``files(run)``: more files to store beside the data (name -> text or bytes: its
        report, ``harness.report.files``), made from the run as it is stored."""
        trace = getattr(self.capture, "trace_dir", None)
        self._trace_stored_at(trace, Path(path) / store.TRACE_DIR)
        out = dict(files(self)) if files is not None else {}
        out[OPS_CSV] = self.ops.to_csv(index=False)
        for name, table in ((CATEGORIES_CSV, self.categories), (UNEXPECTED_CSV, self.unexpected),
                            (PROGRAMS_CSV, self.programs)):
            if table is not None and not table.empty:
                out[name] = table.to_csv(index=False)
        meta = dict(self.meta, **{
            schema.CROSS_CHECK: self.cross_check, schema.TITLE: self.title,
            schema.SUMMARY: self.summary, schema.NOTES: self.notes, schema.STEP_OBJECT: self.step,
            FORMAT_KEY: FORMAT})
        tables = {OPS_PARQUET: self.ops}
        if self.steps is not None:
            tables[STEPS_PARQUET] = self.steps
        if self.collectives is not None and len(self.collectives):
            tables[COLLECTIVES_PARQUET] = self.collectives
        self.path = store.write(path, meta, tables=tables, files=out, trace_dir=trace,
                                move_trace=getattr(self.capture, "owned", True))
        return self.path

    def _trace_stored_at(self, trace, stored: Path) -> None:
        """The meta's trace path (``schema.TRACE_FILE``), where it lies in the capture's
        ``trace`` directory, made the same place in ``stored``, where ``save`` puts it."""
        where = self.meta.get(schema.TRACE_FILE)
        if not where or trace is None or not Path(trace).exists():
            return
        try:
            inside = Path(where).resolve().relative_to(Path(trace).resolve())
        except ValueError:  # a trace elsewhere: not stored with the run
            return
        self.meta[schema.TRACE_FILE] = str((stored.resolve() / inside))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Run:
        """Read a stored run; a missing, damaged or newer-format run raises HarnessError (one
        line)."""
        p = Path(path)
        if not p.is_dir():
            raise HarnessError(f"{p}: no such run directory")
        meta = store.read_meta(p)
        _check_meta(p / store.META, meta)
        version = meta.get(FORMAT_KEY, 1)
        if not isinstance(version, int) or version > FORMAT:
            raise HarnessError(f"{p}: written by a newer scaling-harness (run format {version}; "
                               f"this one reads formats 1 to {FORMAT}); upgrade to read it")
        try:
            ops = pd.read_parquet(p / OPS_PARQUET)
            steps = _optional(p / STEPS_PARQUET, pd.read_parquet, pd.DataFrame())
            cats = _optional(p / CATEGORIES_CSV, pd.read_csv, pd.DataFrame())
            unexpected = _optional(p / UNEXPECTED_CSV, pd.read_csv, None)
            programs = _optional(p / PROGRAMS_CSV, _read_programs, None)
            explained = _optional(p / COLLECTIVES_PARQUET, pd.read_parquet, None)
        except FileNotFoundError:
            raise HarnessError(f"{p}: run is missing {OPS_PARQUET}") from None
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise HarnessError(f"{p}: unreadable run table ({type(e).__name__}: {e})") from None
        _check_ops(p / OPS_PARQUET, ops)
        return cls(title=meta.get(schema.TITLE, p.name), ops=ops, categories=cats,
                   summary=_summary(meta.get(schema.SUMMARY, {}), version),
                   step=meta.get(schema.STEP_OBJECT) or {},
                   notes=list(meta.get(schema.NOTES, [])), steps=steps, unexpected=unexpected,
                   cross_check=meta.get(schema.CROSS_CHECK, {}), programs=programs,
                   collectives=explained,
                   meta={k: v for k, v in meta.items() if k not in _REPORT_KEYS}, path=p)


def _summary(summary: dict, version: int) -> dict:
    """A stored summary in this format's names: before format 3, ``step_s`` named what is now
    ``wall_step_s`` (the untraced wall time, or a stand-in for it; ``step_s`` is now the
    timeline's step, which those runs did not measure)."""
    if version >= 3 or schema.STEP_S not in summary:
        return summary
    return {(schema.WALL_STEP_S if k == schema.STEP_S else k): v for k, v in summary.items()}


def _optional(path: Path, read, default):
    return read(path) if path.exists() else default


def _read_programs(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype={schema.PROGRAM_ID: str}, keep_default_na=False,
                       na_values={c: [""] for c in (schema.PREDICTED_S, schema.EFFICIENCY)})


def list_runs(root: str | os.PathLike = "results") -> list[Run]:
    """Every complete run under ``root``, oldest first (temporary and damaged ones skipped)."""
    runs = []
    for d in store.run_dirs(root):
        try:
            runs.append(Run.load(d))
        except HarnessError as e:
            log.warning("skipping %s", e)
    return runs


def runs_table(root: Path) -> pd.DataFrame:
    """One row per stored run under ``root`` (``list_runs``): where it is, what it ran (its
    workload or test, preset, mesh, overrides and chip), its wall step and its commit."""
    rows = []
    for run in list_runs(root):
        m, s = run.meta, run.summary
        dirty = {True: "yes", False: "no"}.get(m.get(schema.GIT_DIRTY), "")
        rows.append({schema.RUN: str(run.path.relative_to(root)) if run.path != Path(root)
                     else run.name,
                     schema.WORKLOAD: m.get(schema.WORKLOAD) or m.get(schema.TEST) or "",
                     schema.PRESET: m.get(schema.PRESET, ""), schema.MESH: mesh_label(
                         m.get(schema.MESH) or {}),
                     schema.OVERRIDES: " ".join(f"{k}={v}" for k, v in
                                                (m.get(schema.OVERRIDES) or {}).items()),
                     schema.CHIP: m.get(schema.CHIP, ""),
                     schema.WALL_STEP_S: s.get(schema.WALL_STEP_S),
                     schema.GIT_SHA: m.get(schema.GIT_SHA, ""), schema.GIT_DIRTY: dirty,
                     schema.TIME: m.get(schema.TIME, "")})
    return pd.DataFrame(rows)


def _check_meta(path: Path, meta) -> None:
    """A meta.json that is JSON but not a run's: one line naming the file and the field."""
    if not isinstance(meta, dict):
        raise HarnessError(f"{path}: expected a JSON object with workload, mesh, summary, got "
                           f"{json.dumps(meta)[:40]}")
    for key, kind in META_TYPES.items():
        if key in meta and meta[key] is not None and not isinstance(meta[key], kind):
            want = "an object" if kind is dict else "a list" if kind is list else "a string"
            raise HarnessError(f"{path}: {key!r} must be {want}, got {meta[key]!r:.60}")
    mesh = meta.get("mesh") or {}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in mesh.values()):
        raise HarnessError(f"{path}: 'mesh' must map axis names to sizes like "
                           f'{{"X": 4, "Y": 2}}, got {mesh!r:.60}')


def _check_ops(path: Path, ops: pd.DataFrame) -> None:
    """The OPS table has at least program, op and a numeric measured_s (harness.schema)."""
    need = (schema.PROGRAM, schema.OP, schema.MEASURED_S)
    missing = [c for c in need if c not in ops.columns]
    if missing:
        raise HarnessError(f"{path}: not an ops table (missing {', '.join(missing)}; needs "
                           f"{', '.join(need)}, as harness.schema names them)")
    if not pd.api.types.is_numeric_dtype(ops[schema.MEASURED_S]):
        raise HarnessError(f"{path}: column {schema.MEASURED_S} must be numbers (seconds), got "
                           f"{ops[schema.MEASURED_S].dtype}")
