"""Each benchmark's own noise: the spread between runs of the same code, per point.

Runs of the same code land in different modes (a CPU collective at 2.2 ms in one process and
4.6 ms in the next; thread placement; spin-waits), so the steps of one run are no sample of the
run-to-run term, and that term differs from one benchmark to the next by more than 20x. A
point's own spread ``s`` is the sample SD of the log median step over its runs of the same code
(``code``: the commit and the programs' HLO fingerprints), from the history under ``--root``
(earlier runs of the same key, ``pairs.key``) and the repeats of a sweep (``harness sweep
--repeat N``: replicates of one side, ``schema.REPEAT``). With at least ``MIN_RUNS`` runs of one
code it replaces the constant ``judge.Rule.noise``; a point is ``unstable`` when its spread alone
hides a change of the ``--fail-on`` threshold (``z(alpha) sqrt(2) s > log(1 + threshold)``).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from harness import schema
from harness.record import Run
from harness.regress.pairs import key, step_program

MIN_RUNS = 3  # runs of the same code before their spread replaces the constant
OWN, CONSTANT = "own", "constant"  # where a verdict's noise term came from


@dataclass(frozen=True)
class Spread:
    """A point's run-to-run SD of the log median step (``wall``) and of the log median CPU
    time per step (``cpu``; NaN without CPU times), over ``runs`` runs of the same code in
    ``groups`` groups (one per code, pooled)."""

    wall: float
    cpu: float
    runs: int
    groups: int = 1

    def of(self, cpu: bool) -> float:
        """The spread of the figure that decides: the CPU time per step, else the wall step."""
        return self.cpu if cpu else self.wall

    def to_dict(self) -> dict:
        return {"wall": _none(self.wall), "cpu": _none(self.cpu), "runs": self.runs,
                "groups": self.groups}


def _none(x: float):
    return x if math.isfinite(x) else None


def code(run: Run) -> str:
    """What makes two runs runs of the same code: the commit and the programs' fingerprints."""
    return json.dumps([run.meta.get(schema.GIT_SHA), run.meta.get(schema.HLO_FINGERPRINTS)],
                      sort_keys=True, default=str)


def _median_log(run: Run, name: str) -> float:
    times = [t for t in run.meta.get(name) or () if t and t > 0]
    return math.log(float(np.median(times))) if times else math.nan


def pooled(groups: list[list[float]]) -> tuple[float, int]:
    """(pooled SD of the values within each group, the values used): each group's deviations
    from its own mean, over sum(n - 1) degrees of freedom; NaN under ``MIN_RUNS`` values."""
    groups = [[x for x in g if math.isfinite(x)] for g in groups]
    groups = [g for g in groups if len(g) >= 2]
    n, dof = sum(len(g) for g in groups), sum(len(g) - 1 for g in groups)
    if n < MIN_RUNS:
        return math.nan, n
    ss = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups)
    return math.sqrt(ss / dof), n


def spread(groups: list[list[Run]]) -> Spread | None:
    """The spread of one point's runs, each group's runs of one code (pooled over the
    groups); None under ``MIN_RUNS`` runs in groups of two or more."""
    groups = [g for g in groups if len(g) >= 2]
    wall, n = pooled([[_median_log(r, schema.STEP_TIMES_S) for r in g] for g in groups])
    cpu, _ = pooled([[_median_log(r, schema.STEP_CPU_TIMES_S) for r in g] for g in groups])
    if not math.isfinite(wall):
        return None
    return Spread(wall, cpu, n, len(groups))


def spreads(sides: list[list[Run]]) -> dict[str, Spread]:
    """Per key (``pairs.key``), the spread of its runs: each side's runs (the history under
    ``--root``, a baseline's repeats, a candidate's) grouped by code within the side, so that
    a slower candidate of the same commit never widens its own noise; a run found on two sides
    (by path) counted on the first."""
    groups: dict[str, dict[tuple, list[Run]]] = defaultdict(lambda: defaultdict(list))
    seen: set[str] = set()
    for i, side in enumerate(sides):
        for r in side:
            where = str(r.path.resolve()) if r.path is not None else f"id {id(r)}"
            if where not in seen:
                seen.add(where)
                groups[key(r)][(i, code(r))].append(r)
    out = {k: spread(list(g.values())) for k, g in groups.items()}
    return {k: s for k, s in out.items() if s is not None}


def replicates(side: list[Run], run: Run) -> list[Run]:
    """``run`` and the runs of its side that replicate it: the same key and the same code (a
    sweep's repeats, earlier runs of the same commit chosen as the baseline), ``run`` first, the
    others each as compare sees it (``pairs.step_program``)."""
    k, c = key(run), code(run)
    where = run.path.resolve() if run.path is not None else None
    return [run, *(step_program(r) for r in side if key(r) == k and code(r) == c
                   and (r.path is None or r.path.resolve() != where) and r is not run)]


def history_groups(sides: list[list[Run]], judged: list[Run], k: str) -> list[list[Run]]:
    """The runs of key ``k`` in ``sides`` (the history under ``--root``, the baseline side)
    that ``judged`` does not hold, grouped by code: with the two sides' own runs, what a
    confirmed pair's spread pools (its sides may be two keys: two named runs)."""
    held = {r.path.resolve() for r in judged if r.path is not None}
    groups: dict[str, list[Run]] = defaultdict(list)
    seen: set = set()
    for r in (r for side in sides for r in side):
        where = r.path.resolve() if r.path is not None else id(r)
        if key(r) == k and where not in held and where not in seen:
            seen.add(where)
            groups[code(r)].append(r)
    return list(groups.values())
