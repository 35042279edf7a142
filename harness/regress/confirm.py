"""Confirm before failing (``harness compare --confirm N``): a pair that looks like a regression
is run again, N times in fresh processes, before its verdict.

A nightly job has the candidate's code at hand, so a workload run (a sweep point or a
registered workload: ``meta`` names its workload, preset, overrides, mesh, steps and warmup)
is re-run from what its meta says, each time in a spawned process (``harness.sweep.repeat``),
stored under the confirmation directory. Its verdict then uses them: the candidate's runs (the
first and its confirmations, one code) give the point's spread where it had none
(``harness.regress.noise``) and are judged together, by their mean, against the baseline's runs
of its code: the regression stands only when that mean is still slower beyond the threshold and
the spread (a first run that landed in a slow mode is outvoted by its reruns). Profile and
trace runs, which cannot be re-run, are judged from history, and the verdict says they were
not confirmed; so is a run whose commit is not the one installed here (confirming it would
time other code).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

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
    """``v``'s verdict given ``runs``, reruns of its candidate: the candidate's runs (the first
    and its reruns, one code) judged by their mean against the baseline's runs of its code
    (``sides[0]``, the baseline side), with the point's spread measured from ``sides`` and the
    candidate's runs (the module docstring)."""
    n, cand = len(runs), [v.candidate, *runs]
    spread = noise.spreads([*sides, cand]).get(pairs.key(v.candidate))
    base = [v.baseline, *map(pairs.step_program, noise.replicates(sides[0], v.baseline)[1:])] \
        if sides else [v.baseline]
    j = judge.compare(v.baseline, v.candidate, rule, spread=spread, reps=(base, cand))
    said = "confirmed" if j.verdict == judge.REGRESSION else "not confirmed"
    return dataclasses.replace(j, message=f"{said} by {n} rerun(s) in fresh processes, the "
                                          f"candidate's {n + 1} runs judged by their mean: "
                                          f"{j.message}")
