"""The Run: one analysed program run, in memory and on disk.

What ran (``meta``: workload and config or the user's function, mesh, chip, environment,
timings), what it produced (``capture``: the trace and the program's HLO), its tables (``ops``,
``categories``, ``steps``: per-step samples, ``unexpected`` collectives), ``summary`` figures and
``notes``. Every entry point makes one (``harness.runs.pipeline``); ``Run.save(dir)`` stores it
atomically as ``results/<run-id>/``, ``Run.load(dir)`` reads it back, ``run.render(fmt)`` prints
it. Plots are drawn only when a format that shows them asks (``figures``).

On disk (``FORMAT`` in meta.json; a run saved before the key existed is format 1, which has the
same files): meta.json (meta, title, summary, notes, cross-check, step), ops.parquet and ops.csv,
steps.parquet, collectives.parquet (every collective explained, where any ran), categories.csv,
programs.csv, unexpected_collectives.csv, report.md,
report.html, the PNG plots and ``trace/``.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.capture import environment
from harness.errors import HarnessError
from harness.report import render
from harness.report.plots import CATEGORIES_PNG, ROOFLINE_PNG, report_plots
from harness.report.step_plot import STEP_PNG, step_timeline
from harness.runs import store

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
PLOTS = (STEP_PNG, ROOFLINE_PNG, CATEGORIES_PNG)
REPORT_FILES = {"report.md": "md", "report.html": "html"}  # rendered beside the tables
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
class Run:
    """One analysed run. ``chip`` (the ``predictions.hardware.Chip`` it was predicted for),
    ``capture`` and ``trace`` are what a fresh run was made from; a loaded run has its PNGs
    and trace on disk instead."""

    title: str = ""
    meta: dict = field(default_factory=dict)
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)
    summary: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    unexpected: pd.DataFrame | None = None  # collectives the layout did not call for
    cross_check: dict = field(default_factory=dict)  # our FLOPs/bytes against cost_analysis()
    programs: pd.DataFrame | None = None  # schema.PROGRAMS: every program that ran
    step: dict = field(default_factory=dict)  # schema.STEP_OBJECT: the step as a whole
    collectives: pd.DataFrame | None = None  # schema.COLLECTIVES: every collective explained
    step_spans: pd.DataFrame | None = None  # schema.STEP_SPANS of that step (a fresh run's)
    predicted_spans: pd.DataFrame | None = None  # the same of the simulated roofline step
    chip: object | None = None
    capture: object | None = None   # harness.capture.steps.Capture: trace directory, HLO, cost
    trace: object | None = None     # harness.trace.TraceEvents: EVENTS, format, async names
    plots: dict[str, bytes] = field(default_factory=dict)  # file name -> PNG, once drawn
    files: dict[str, str | bytes] = field(default_factory=dict)  # more files to save with it
    path: Path | None = None

    @property
    def events(self) -> pd.DataFrame | None:
        """The EVENTS the run was analysed from (a fresh run's only)."""
        return self.trace.events if self.trace is not None else None

    @property
    def run_id(self) -> str:
        return self.path.name if self.path is not None else ""

    def figures(self) -> dict[str, bytes]:
        """The report's plots (the step timeline, roofline, categories), drawn once on first
        use."""
        if not self.plots and self.chip is not None and len(self.ops):
            step = step_timeline(self.step_spans, self.step, self.predicted_spans)
            self.plots = {**({STEP_PNG: step} if step else {}),
                          **report_plots(self.ops, self.categories, self.chip)}
        return self.plots

    def render(self, fmt: str = "text", top: int | None = None) -> str:
        """The report as text (terminal), md, html, json or csv (``harness.report``)."""
        return render(self, fmt, top=top)

    def save(self, path: str | os.PathLike, *, plots: bool = True) -> Path:
        """Store the run atomically at ``path`` (which must not exist); its capture's trace
        directory moves into the run's ``trace/``, and a trace path in its meta points there.
        The commit is the meta's own (a profiled script's), else ``environment.git_state()``.
        ``plots`` False: no PNGs (a sweep point)."""
        trace = getattr(self.capture, "trace_dir", None)
        self._trace_stored_at(trace, Path(path) / store.TRACE_DIR)
        files: dict[str, str | bytes] = {name: render(self, fmt, plots=plots) for name, fmt in
                                         REPORT_FILES.items()}
        files.update(self.figures() if plots else {})
        files.update(self.files)
        files[OPS_CSV] = self.ops.to_csv(index=False)
        if self.categories is not None and not self.categories.empty:
            files[CATEGORIES_CSV] = self.categories.to_csv(index=False)
        if self.unexpected is not None and not self.unexpected.empty:
            files[UNEXPECTED_CSV] = self.unexpected.to_csv(index=False)
        if self.programs is not None and not self.programs.empty:
            files[PROGRAMS_CSV] = self.programs.to_csv(index=False)
        meta = dict(self.meta, **{
            schema.CROSS_CHECK: self.cross_check, schema.TITLE: self.title,
            schema.SUMMARY: self.summary, schema.NOTES: self.notes, schema.STEP_OBJECT: self.step,
            **({} if schema.GIT_SHA in self.meta else environment.git_state()),
            FORMAT_KEY: FORMAT})
        tables = {OPS_PARQUET: self.ops}
        if self.steps is not None:
            tables[STEPS_PARQUET] = self.steps
        if self.collectives is not None and len(self.collectives):
            tables[COLLECTIVES_PARQUET] = self.collectives
        self.path = store.write(path, meta, tables=tables, files=files, trace_dir=trace,
                                move_trace=getattr(self.capture, "owned", True))
        self.meta.update({k: meta[k] for k in (schema.GIT_SHA, schema.GIT_DIRTY) if k in meta})
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
                   meta={k: v for k, v in meta.items() if k not in _REPORT_KEYS},
                   plots={name: (p / name).read_bytes() for name in PLOTS if (p / name).exists()},
                   path=p)


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
