"""Confirm before failing (``harness compare --confirm N``): a pair that looks like a regression
is run again, N times in fresh processes, before its verdict.

A nightly job has the candidate's code at hand, so a workload run (a sweep point or a
registered workload: ``meta`` names its workload, preset, overrides, mesh, steps and warmup)
is re-run from what its meta says, each time in a spawned process (``harness.sweep.repeat``),
stored under the confirmation directory. Its verdict then uses them: the candidate's runs (the
first and its confirmations, one code) give the point's spread where it had none
(``harness.regress.noise``), each confirmation is judged against the baseline, and the
regression stands only when most of them are regressions too; else the verdict is the
median confirmation's, saying it was not confirmed. Profile and trace runs, which cannot be
re-run, are judged from history, and the verdict says they were not confirmed; so is a run
whose commit is not the one installed here (confirming it would time other code).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from harness import schema
from harness.capture.environment import git_state
from harness.regress import judge, noise, pairs
from harness.runs.run import Run
from harness.sweep import repeat as repeat_runs
from harness.sweep.grid import Point

NOT_RERUNNABLE = "not confirmed: a profile or trace run cannot be re-run; judged from history"
A_TEST = ("not confirmed: a pytest test's run is confirmed by running the test again, not by "
          "harness compare; judged from history")


def point(run: Run) -> Point | None:
    """The sweep point that re-runs ``run``: None for a profile or trace run (no workload, or a
    script or trace file behind it)."""
    m = run.meta
    if not m.get(schema.WORKLOAD) or m.get(schema.SCRIPT) or m.get(schema.TRACE_FILE) \
            or m.get(schema.TEST):
        return None
    mesh = m.get(schema.MESH) or {}
    chip = m.get(schema.CHIP) if m.get(schema.CHIP_SOURCE) not in (None, "device") else None
    return Point(str(m[schema.WORKLOAD]), str(m.get(schema.PRESET) or "tiny"),
                 "x".join(str(v) for v in mesh.values()), dict(m.get(schema.OVERRIDES) or {}),
                 chip, int(m.get(schema.STEPS) or 10), int(m.get(schema.WARMUP) or 2))


def why_not(run: Run, installed: str | None) -> str | None:
    """Why ``run`` cannot be confirmed here (None: it can)."""
    if point(run) is None:
        return A_TEST if run.meta.get(schema.TEST) else NOT_RERUNNABLE
    sha = run.meta.get(schema.GIT_SHA)
    if installed is None or sha is None or not (installed.startswith(sha)
                                                or sha.startswith(installed)):
        return (f"not confirmed: the run's commit ({sha or 'unknown'}) is not the one installed "
                f"here ({installed or 'unknown'})")
    return None


def confirm(v: judge.Verdict, n: int, out: Path, rule: judge.Rule, sides: list[list[Run]],
            installed: str | None = None) -> judge.Verdict:
    """``v`` (a regression) confirmed with ``n`` reruns of its candidate under ``out``, or said
    unconfirmed. ``sides``: the runs its spread is measured from (baseline side, history)."""
    installed = installed if installed is not None else git_state().get(schema.GIT_SHA)
    reason = why_not(v.candidate, installed)
    if reason is not None:
        return dataclasses.replace(v, message=f"{v.message}; {reason}")
    p = point(v.candidate)
    runs = [pairs.step_program(repeat_runs.fresh(p, out / p.key, False, i)) for i in range(n)]
    return with_reruns(v, runs, rule, sides)


def with_reruns(v: judge.Verdict, runs: list[Run], rule: judge.Rule,
                sides: list[list[Run]]) -> judge.Verdict:
    """``v``'s verdict given ``runs``, reruns of its candidate (the module docstring)."""
    n = len(runs)
    spread = noise.spreads([*sides, [v.candidate, *runs]]).get(pairs.key(v.candidate))
    judged = [judge.compare(v.baseline, r, rule, spread=spread) for r in runs]
    slower = sum(j.verdict == judge.REGRESSION for j in judged)
    if 2 * slower > n:
        head = judge.compare(v.baseline, v.candidate, rule, spread=spread)
        if head.verdict != judge.REGRESSION:  # its own spread now says it is within noise
            head = _median(judged)
        return dataclasses.replace(head, message=f"confirmed by {slower} of {n} reruns in "
                                                 f"fresh processes: {head.message}")
    j = _median(judged)
    return dataclasses.replace(j, message=f"not confirmed: {slower} of {n} reruns in fresh "
                                          f"processes a regression; {j.message}")


def _median(judged: list[judge.Verdict]) -> judge.Verdict:
    """The confirmation whose change is the median of theirs."""
    changes = [j.change if math.isfinite(j.change) else -math.inf for j in judged]
    return judged[int(np.argsort(changes)[(len(changes) - 1) // 2])]
