"""Confirm before failing (``harness compare --confirm N``): a pair that looks like a regression
is run again, N times in fresh processes, before its verdict.

A nightly job has the candidate's code at hand, so a workload run (a sweep point or a
registered workload: ``meta`` names its workload, preset, overrides, mesh, steps and warmup)
is re-run from what its meta says, each time in a spawned process (``harness.sweep.repeat``),
stored under the confirmation directory. Its verdict then uses them: the candidate's runs (the
first and its confirmations, one code) give the point's spread where it had none
(``harness.regress.noise``), and the reruns are judged by their mean against the baseline's
(its reruns where it has some, else its runs of its code): the regression stands only when the
reruns are still slower beyond the threshold and the spread. The first run is no evidence
for it: the pair was chosen for looking slower (a first run that landed in a slow mode, or a
baseline that landed in a fast one, would otherwise vote for what chose it). Where the
baseline's commit is the one installed too (a night with no new commit), the baseline is re-run
as often, interleaved with the candidate: runs of one code minutes apart land in one mode more
often than not (a CPU all-reduce at 0.8 ms in one sweep, then 1.3 ms in the next and in both
reruns after it), so reruns of the candidate alone would confirm a mode, not a change. Profile and
trace runs, which cannot be re-run, are judged from history, and the verdict says they were
not confirmed; so is a run whose commit is not the one installed here (confirming it would
time other code).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import schema
from harness.capture.environment import git_state
from harness.record import Run
from harness.regress import judge, noise, pairs
from harness.sweep import repeat as repeat_runs
from harness.sweep.grid import Point
from predictions.mesh import mesh_label

BASELINE = "baseline"  # under the confirmations: the baseline's reruns, apart from the candidate's
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
                 mesh_label(mesh), dict(m.get(schema.OVERRIDES) or {}),
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


def rerun_pair(v: judge.Verdict, n: int, out: Path, rule: judge.Rule, sides: list[list[Run]],
               installed: str | None = None) -> judge.Verdict:
    """``v`` (a regression) confirmed with ``n`` reruns of its candidate under ``out``, and as
    many of its baseline where the baseline's code is the one installed too (the two
    interleaved), or said unconfirmed. ``sides``: the runs its spread is measured from
    (baseline side, history)."""
    installed = installed if installed is not None else git_state().get(schema.GIT_SHA)
    reason = why_not(v.candidate, installed)
    if reason is not None:
        return dataclasses.replace(v, message=f"{v.message}; {reason}")
    p, b = point(v.candidate), None if why_not(v.baseline, installed) else point(v.baseline)
    runs, base = [], []
    for i in range(n):  # interleaved: a mode the host is in falls on both sides alike
        if b is not None:
            base.append(pairs.step_program(repeat_runs.fresh(b, out / BASELINE / b.key, False,
                                                             i)))
        runs.append(pairs.step_program(repeat_runs.fresh(p, out / p.key, False, i)))
    return with_reruns(v, runs, rule, sides, base)


def with_reruns(v: judge.Verdict, runs: list[Run], rule: judge.Rule,
                sides: list[list[Run]], base_runs: list[Run] = ()) -> judge.Verdict:
    """``v``'s verdict given ``runs``, reruns of its candidate, and ``base_runs``, reruns of
    its baseline: each side's runs of one code (the first, its replicates and its reruns)
    judged by their mean, with the point's spread measured from ``sides`` and both sides'
    runs (the module docstring)."""
    n, cand = len(runs), [v.candidate, *runs]
    base = noise.replicates(sides[0], v.baseline) if sides else [v.baseline]
    base += list(base_runs)
    spread = noise.spread([base, cand, *noise.history_groups(sides, [*base, *cand],
                                                             pairs.key(v.candidate))])
    # the first runs made the pair a suspect (it was chosen for looking slower): they widen
    # the spread, but the means compared are of the reruns, where each side has some
    judged = (list(base_runs) or base, list(runs) or cand)
    j = judge.compare(v.baseline, v.candidate, rule, spread=spread, reps=judged, student=True)
    said = "confirmed" if j.verdict == judge.REGRESSION else "not confirmed"
    each = " of each side, interleaved," if base_runs else ""
    whose = "both sides' reruns" if base_runs else f"the candidate's {n} reruns"
    return dataclasses.replace(j, message=f"{said} by {n} rerun(s){each} in fresh processes, "
                                          f"{whose} judged by their mean: {j.message}")
