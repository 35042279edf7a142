"""What ``harness compare`` compares: the runs under each side (a run, a sweep, any directory of
saved runs), paired by what they are runs of, or a baseline picked by name from a results root."""
from __future__ import annotations

import re
from pathlib import Path

from harness import schema
from harness.errors import HarnessError
from harness.runs import store
from harness.runs.run import Run

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
        mesh = "x".join(str(v) for v in (m.get(schema.MESH) or {}).values())
        return " ".join(x for x in (m[schema.WORKLOAD], m.get(schema.PRESET, ""), sets,
                                    f"mesh {mesh}" if mesh else "") if x)
    return str(m.get(schema.PROGRAM) or run.run_id)


def _age(run: Run) -> tuple:
    return str(run.meta.get(schema.TIME, "")), run.run_id


def load_all(path: str | Path) -> list[Run]:
    """The runs at or under ``path``: one run, or every run in a directory of them."""
    p = Path(path)
    if not p.is_dir():
        raise HarnessError(f"{p}: no such run directory")
    dirs = store.run_dirs(p)
    if not dirs:
        raise HarnessError(f"{p}: not a run and holds no runs (no {store.META} at or under it)")
    return [Run.load(d) for d in dirs]


def newest(runs: list[Run]) -> dict[str, Run]:
    """Per key, its newest run."""
    out: dict[str, Run] = {}
    for run in sorted(runs, key=_age):
        out[key(run)] = run
    return out


def pair(baseline: list[Run], candidate: list[Run]
         ) -> tuple[list[tuple[Run, Run]], list[Run], list[Run]]:
    """(pairs, baseline runs without a candidate, candidate runs without a baseline): the newest
    run of each key on each side. Two single runs are one pair whatever they are runs of."""
    if len(baseline) == 1 and len(candidate) == 1:
        return [(baseline[0], candidate[0])], [], []
    b, c = newest(baseline), newest(candidate)
    return ([(b[k], c[k]) for k in c if k in b], [b[k] for k in b if k not in c],
            [c[k] for k in c if k not in b])


def choose(root: str | Path, selector: str, candidate: list[Run]) -> list[Run]:
    """Baseline runs under ``root`` for ``candidate``'s keys by ``selector``: ``latest``, a
    commit (a hex prefix of the runs' git_sha) or a date (YYYY-MM-DD: the newest run of that day
    or before); the candidate's own runs left out."""
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
    runs = [Run.load(d) for d in store.run_dirs(root) if d.resolve() not in own]
    found = [r for r in runs if key(r) in keys and wanted(r)]
    if not found:
        raise HarnessError(f"--baseline {selector}: no run under {root}/ of "
                           f"{', '.join(sorted(keys))}")
    return found
