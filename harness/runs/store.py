"""Runs on disk: ``results/<run-id>/`` with meta.json, ops.parquet/.csv, steps.parquet, reports.

This module both writes and reads a run: ``save_report`` stores a report (with its per-step
samples and trace), ``load`` gives it back as a ``StoredRun``, whose ``report`` is the same kind
of object that was saved. A run is written into a temporary sibling directory and renamed into
place, so a crash never leaves a half-written run; a directory without ``meta.json`` is not a run.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.report import CATEGORIES_PNG, ROOFLINE_PNG, Report, render

log = logging.getLogger(__name__)

META = "meta.json"
OPS_PARQUET = "ops.parquet"
OPS_CSV = "ops.csv"
STEPS_PARQUET = "steps.parquet"
CATEGORIES_CSV = "categories.csv"
UNEXPECTED_CSV = "unexpected_collectives.csv"
TRACE_DIR = "trace"
TMP_PREFIX = ".tmp-"
PLOTS = (ROOFLINE_PNG, CATEGORIES_PNG)
REPORT_FORMATS = {"report.md": "md", "report.html": "html"}  # rendered beside the tables
# meta.json keys that belong to the report rather than to the run's metadata
_REPORT_KEYS = (schema.TITLE, schema.SUMMARY, schema.NOTES, schema.CROSS_CHECK)
# meta.json fields that, when present, must have these JSON types (a hand-edited file may not).
META_TYPES: dict[str, type | tuple[type, ...]] = {
    schema.SUMMARY: dict, schema.MESH: dict, schema.CONFIG: dict, schema.OVERRIDES: dict,
    schema.NOTES: list, schema.CROSS_CHECK: dict, schema.WORKLOAD: str, schema.PRESET: str,
    schema.TITLE: str,
}


@dataclass
class StoredRun:
    """A run as saved: metadata, the OPS table, per-step samples, per-category summary, the
    collectives the layout did not call for, and the report's plots (file name -> PNG)."""

    path: Path
    meta: dict
    ops: pd.DataFrame
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)
    unexpected: pd.DataFrame | None = None
    plots: dict[str, bytes] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def summary(self) -> dict:
        return self.meta.get(schema.SUMMARY, {})

    @property
    def report(self) -> Report:
        """The report this run was saved from: tables, summary, notes, plots."""
        meta = {k: v for k, v in self.meta.items() if k not in _REPORT_KEYS}
        return Report(title=self.meta.get(schema.TITLE, self.run_id), ops=self.ops,
                      categories=self.categories, summary=self.summary, meta=meta,
                      notes=list(self.meta.get(schema.NOTES, [])), unexpected=self.unexpected,
                      plots=dict(self.plots))


def git_sha() -> str:
    """The working tree's commit, or "" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    return str(obj)


def save(path: str | os.PathLike, meta: dict, ops: pd.DataFrame, *,
         steps: pd.DataFrame | None = None, categories: pd.DataFrame | None = None,
         reports: dict[str, str | bytes] | None = None,
         trace_dir: str | os.PathLike | None = None) -> Path:
    """Write a run atomically to ``path``; ``reports`` maps file name -> content.

    ``trace_dir`` (a capture's output) is moved into the run's ``trace/``.
    """
    final = Path(path)
    if final.exists():
        raise HarnessError(f"{final}: a run with this id already exists")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + final.name + "-", dir=final.parent))
    try:
        (tmp / META).write_text(json.dumps(_jsonable(meta), indent=2) + "\n")
        ops.to_parquet(tmp / OPS_PARQUET, index=False)
        ops.to_csv(tmp / OPS_CSV, index=False)
        if steps is not None:
            steps.to_parquet(tmp / STEPS_PARQUET, index=False)
        if categories is not None:
            categories.to_csv(tmp / CATEGORIES_CSV, index=False)
        for name, content in (reports or {}).items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(tmp / name, mode) as f:
                f.write(content)
        if trace_dir is not None and Path(trace_dir).exists():
            shutil.move(str(trace_dir), tmp / TRACE_DIR)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("saved run %s", final)
    return final


def save_report(path: str | os.PathLike, report: Report, *, steps: pd.DataFrame | None = None,
                meta: dict | None = None, extra: dict[str, str | bytes] | None = None,
                trace_dir: str | os.PathLike | None = None) -> Path:
    """Store ``report`` as a run: its tables and figures, Markdown and HTML renderings, plots and
    unexpected collectives; ``meta`` adds run metadata, ``extra`` more files (name -> content).
    ``load(path).report`` gives the report back."""
    files: dict[str, str | bytes] = {name: render(report, fmt)
                                     for name, fmt in REPORT_FORMATS.items()}
    files.update(report.plots)
    files.update(extra or {})
    if report.unexpected is not None and not report.unexpected.empty:
        files[UNEXPECTED_CSV] = report.unexpected.to_csv(index=False)
    full = dict(report.meta, **(meta or {}), **{
        schema.TITLE: report.title, schema.SUMMARY: report.summary, schema.NOTES: report.notes,
        schema.GIT_SHA: git_sha()})
    return save(path, full, report.ops, steps=steps, categories=report.categories,
                reports=files, trace_dir=trace_dir)


def load(path: str | os.PathLike) -> StoredRun:
    """Read a stored run; a missing or damaged run directory raises HarnessError (one line)."""
    p = Path(path)
    if not p.is_dir():
        raise HarnessError(f"{p}: no such run directory")
    try:
        meta = json.loads((p / META).read_text())
    except FileNotFoundError:
        raise HarnessError(f"{p}: not a run (no {META})") from None
    except json.JSONDecodeError as e:
        raise HarnessError(f"{p / META}: corrupt JSON ({e})") from None
    _check_meta(p / META, meta)
    try:
        ops = pd.read_parquet(p / OPS_PARQUET)
        steps = pd.read_parquet(p / STEPS_PARQUET) if (p / STEPS_PARQUET).exists() else \
            pd.DataFrame()
        cats = pd.read_csv(p / CATEGORIES_CSV) if (p / CATEGORIES_CSV).exists() else \
            pd.DataFrame()
        unexpected = pd.read_csv(p / UNEXPECTED_CSV) if (p / UNEXPECTED_CSV).exists() else None
    except FileNotFoundError:
        raise HarnessError(f"{p}: run is missing {OPS_PARQUET}") from None
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise HarnessError(f"{p}: unreadable run table ({type(e).__name__}: {e})") from None
    _check_ops(p / OPS_PARQUET, ops)
    plots = {name: (p / name).read_bytes() for name in PLOTS if (p / name).exists()}
    return StoredRun(path=p, meta=meta, ops=ops, steps=steps, categories=cats,
                     unexpected=unexpected, plots=plots)


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


def resolve(ref: str | os.PathLike, root: str | os.PathLike = "results") -> Path:
    """A run given as a path, or as a run id (or unique prefix) under ``root``."""
    p = Path(ref)
    if p.is_dir():
        return p
    if p.is_absolute() or len(p.parts) > 1:
        raise HarnessError(f"{ref}: no such run directory")
    matches = sorted(d for d in Path(root).glob(f"{ref}*") if (d / META).exists())
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise HarnessError(f"{ref}: no such run (not a directory, and no run id under {root}/)")
    raise HarnessError(f"{ref}: ambiguous run id, matches {[m.name for m in matches]}")


def scratch_prefix(kind: str) -> str:
    """``.tmp-capture-p<pid>-``: scratch names carry the owner's process id."""
    return f"{TMP_PREFIX}{kind}-p{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_stale_scratch(root: str | os.PathLike, kind: str = "capture") -> list[Path]:
    """Remove ``root``'s scratch directories whose process is gone (a killed run's); those of
    a live process (a concurrent run) stay. Returns what was removed."""
    gone = []
    for d in Path(root).glob(f"{TMP_PREFIX}{kind}-p*-*"):
        pid = d.name[len(f"{TMP_PREFIX}{kind}-p"):].split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s, left by a run that was killed", d)
            gone.append(d)
    return gone


def list_runs(root: str | os.PathLike = "results") -> list[StoredRun]:
    """Every complete run under ``root``, oldest first (temporary and damaged ones skipped)."""
    runs = []
    for d in sorted(Path(root).glob("*")):
        if d.is_dir() and not d.name.startswith(TMP_PREFIX) and (d / META).exists():
            try:
                runs.append(load(d))
            except HarnessError as e:
                log.warning("skipping %s", e)
    return runs
