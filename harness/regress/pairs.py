"""What ``harness compare`` compares: the runs under each side (a run, a sweep, any directory of
saved runs), paired by what they are runs of, or a baseline picked by name from a results root;
of each run, its step program (``step_program``)."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

from harness import schema
from harness.analysis.programs import of_program
from harness.errors import HarnessError
from harness.record import Run, store
from predictions.mesh import mesh_label

LATEST = "latest"
_COMMIT = re.compile(r"[0-9a-f]{4,40}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def key(run: Run) -> str:
    """What a run is a run of: its pytest test, else its workload, preset, config overrides
    and mesh, else its program."""
    m = run.meta
    if m.get(schema.TEST):
        return str(m[schema.TEST])
    if m.get(schema.WORKLOAD):
        sets = " ".join(f"{k}={v}" for k, v in sorted((m.get(schema.OVERRIDES) or {}).items()))
        mesh = mesh_label(m.get(schema.MESH) or {})
        return " ".join(x for x in (m[schema.WORKLOAD], m.get(schema.PRESET, ""), sets,
                                    f"mesh {mesh}" if mesh else "") if x)
    return str(m.get(schema.PROGRAM) or run.name)


def _of_step(table, meta: dict):
    """The rows of ``table`` of the program ``meta`` names (its program id, else its name); all
    rows where it names none that the table holds."""
    if table is None:
        return None
    picked = of_program(table, str(meta.get(schema.PROGRAM_ID) or meta.get(schema.PROGRAM)
                                   or ""))
    return picked.reset_index(drop=True) if len(picked) else table


def step_program(run: Run) -> Run:
    """The run as compare sees it: its ops, per-step samples and collectives of its step
    program alone (the program its step object and summary are of, ``meta``'s program and
    program id), where it stored others beside it (``--program all``)."""
    m = run.meta
    return dataclasses.replace(run, ops=_of_step(run.ops, m), steps=_of_step(run.steps, m),
                               collectives=_of_step(run.collectives, m))


def _age(run: Run) -> tuple:
    return str(run.meta.get(schema.TIME, "")), run.name


def load_all(path: str | Path) -> list[Run]:
    """The runs at or under ``path``: one run, every run in a directory of them, or a profiler
    trace (a ``*.xplane.pb``, or a directory of them holding no run: a ``jax.profiler`` profile
    directory) analysed as one run (``pipeline.analyze_trace``; its ``path`` is the trace's)."""
    from harness.trace.load import TRACE_SUFFIX

    p = Path(path)
    if p.is_file() and p.name.endswith(TRACE_SUFFIX):
        return [_trace(p)]
    if not p.is_dir():
        raise HarnessError(f"{p}: no such run directory or *{TRACE_SUFFIX} trace")
    dirs = store.run_dirs(p)
    if not dirs:
        if next(p.rglob(f"*{TRACE_SUFFIX}"), None) is not None:
            return [_trace(p)]
        raise HarnessError(f"{p}: not a run and holds no runs (no {store.META} at or under it) "
                           f"nor traces (*{TRACE_SUFFIX})")
    return [Run.load(d) for d in dirs]


def _trace(path: Path) -> Run:
    from harness.runs import pipeline

    run = pipeline.analyze_trace(path)
    run.path = path
    return run


def newest(runs: list[Run]) -> dict[str, Run]:
    """Per key, its newest run."""
    out: dict[str, Run] = {}
    for run in sorted(runs, key=_age):
        out[key(run)] = run
    return out


def pair(baseline: list[Run], candidate: list[Run]
         ) -> tuple[list[tuple[Run, Run]], list[Run], list[Run]]:
    """(pairs, baseline runs without a candidate, candidate runs without a baseline): the newest
    run of each key on each side, each of its step program (``step_program``). Two single
    runs are one pair whatever they are runs of."""
    if len(baseline) == 1 and len(candidate) == 1:
        return [(step_program(baseline[0]), step_program(candidate[0]))], [], []
    b, c = newest(baseline), newest(candidate)
    return ([(step_program(b[k]), step_program(c[k])) for k in c if k in b],
            [b[k] for k in b if k not in c], [c[k] for k in c if k not in b])


def runs_under(root: str | Path, loaded: Iterable[Run] = ()) -> list[Run]:
    """Every run under ``root`` (none where it is no directory), oldest first; those ``loaded``
    already (by path) are not read again."""
    if not Path(root).is_dir():
        return []
    have = {r.path.resolve(): r for r in loaded if r.path is not None}
    return [have.get(d.resolve()) or Run.load(d) for d in store.run_dirs(root)]


def choose(runs: list[Run], selector: str, candidate: list[Run], root: str | Path) -> list[Run]:
    """Baseline runs among ``runs`` (those under ``root``, ``runs_under``) for ``candidate``'s
    keys by ``selector``: ``latest``, a commit (a hex prefix of the runs' git_sha) or a date
    (YYYY-MM-DD: the newest run of that day or before); the candidate's own runs left out."""
    if selector == LATEST:
        def wanted(run: Run) -> bool:
            return True
    elif _DATE.fullmatch(selector):
        def wanted(run: Run) -> bool:
            return str(run.meta.get(schema.TIME, ""))[:10] <= selector
    elif _COMMIT.fullmatch(selector):
        def wanted(run: Run) -> bool:
            return str(run.meta.get(schema.GIT_SHA, "")).startswith(selector)
    else:
        raise HarnessError(f"--baseline must be {LATEST}, a commit (hex prefix) or a date "
                           f"(YYYY-MM-DD), got {selector!r}")
    own = {r.path.resolve() for r in candidate}
    keys = {key(r) for r in candidate}
    found = [r for r in runs if r.path is not None and r.path.resolve() not in own
             and key(r) in keys and wanted(r)]
    if not found:
        raise HarnessError(f"--baseline {selector}: no run under {root}/ of "
                           f"{', '.join(sorted(keys))}")
    return found
