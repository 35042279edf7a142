"""Run directories on disk: ``results/<run-id>/``, written atomically, found and resolved.

A run is written into a temporary sibling directory and renamed into place, so a crash never
leaves a half-written run; a directory without ``meta.json`` is not a run. What the files hold
is the Run's business (``harness.record.run``); this module knows directories, ``meta.json``,
the ``trace/`` folder and run ids (the scratch space of runs in progress is
``harness.runs.scratch``'s).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from harness.errors import HarnessError
from harness.units import json_text

log = logging.getLogger(__name__)

META = "meta.json"
TRACE_DIR = "trace"
TMP_PREFIX = ".tmp-"


def write(path: str | os.PathLike, meta: dict, *, tables: dict[str, pd.DataFrame],
          files: dict[str, str | bytes], trace_dir: str | os.PathLike | None = None,
          move_trace: bool = True) -> Path:
    """Write a run directory atomically to ``path``: ``meta.json``, each table as parquet
    (file name -> frame), each file (name -> text or bytes); ``trace_dir`` (a capture's output)
    is moved into the run's ``trace/`` (``move_trace`` False: copied, as someone else's)."""
    final = Path(path)
    if final.exists():
        raise HarnessError(f"{final}: a run with this id already exists")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + final.name + "-", dir=final.parent))
    try:
        (tmp / META).write_text(json_text(meta, indent=2) + "\n")  # NaN figures: null
        for name, df in tables.items():
            df.to_parquet(tmp / name, index=False)
        for name, content in files.items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(tmp / name, mode) as f:
                f.write(content)
        if trace_dir is not None and Path(trace_dir).exists():
            if move_trace:
                shutil.move(str(trace_dir), tmp / TRACE_DIR)
            else:
                shutil.copytree(trace_dir, tmp / TRACE_DIR)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("saved run %s", final)
    return final


def read_meta(path: Path) -> object:
    """A run directory's parsed ``meta.json``; one-line errors when it is missing or not JSON."""
    try:
        return json.loads((path / META).read_text())
    except FileNotFoundError:
        raise HarnessError(f"{path}: not a run (no {META})") from None
    except json.JSONDecodeError as e:
        raise HarnessError(f"{path / META}: corrupt JSON ({e})") from None


def run_dirs(root: str | os.PathLike = "results") -> list[Path]:
    """Every run directory (one with a ``meta.json``) at or under ``root``, a sweep's and a
    pytest ``--harness-save`` directory's included, oldest first (run ids start with their
    time); temporary ones skipped, and nothing inside a run."""
    found, todo = [], [Path(root)]
    while todo:
        d = todo.pop()
        if (d / META).is_file():
            found.append(d)
        elif d.is_dir():
            todo += [c for c in d.iterdir() if c.is_dir() and not c.name.startswith(TMP_PREFIX)]
    return sorted(found, key=lambda d: (d.name, str(d)))


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
