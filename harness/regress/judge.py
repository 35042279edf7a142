"""Baseline vs candidate: one verdict per pair of runs, its cause first.

What the runs measured: the wall step (``schema.STEP_TIMES_S``, the untraced steps' wall times);
on CPU, the CPU time the process spent in each of them (``schema.STEP_CPU_TIMES_S``, every
thread's: the work of a step, whatever share of the host other processes left it; on the busy
2-core development host it moved 3.9% (sd of the log) between runs of the same code while the
wall step moved 35%); the host speed probe before and after the steps
(``harness.chip.drift``: its FLOP/s, the host as other processes leave it, and its FLOPs
per CPU second, the cores' own speed); and the program (``harness.regress.changes.program``).

A change is the log ratio of two medians. Its noise is each median's standard error (1.2533 x
the robust sigma of the log steps over root n) and a run-to-run term: the point's own spread
(``harness.regress.noise``: the SD of the log median between runs of the same code, from the
history under ``--root`` and each side's repeats; then the error is sqrt(2) s, never under the
medians' own) where at least 3 runs give one, else the constant ``Rule.noise`` of each run; the
verdict says which (``Verdict.noise``). A change is **worse** (``figures.worse``) when beyond its
``--fail-on`` threshold (default step=10%) and one-sided significant at ``alpha`` (0.01). The
figure that decides (``Verdict.decided``): the CPU time per step on CPU (where both runs have
it), else the wall step; two layouts of one model (two programs side by side), the traced step,
the step their headline breaks down, so that the headline and the verdict never disagree. More
CPU time per step never decides when the wall step got faster (threads spinning while they wait
burn CPU time without lengthening the step). The verdicts (``VERDICTS``), in the order they are
decided (``CAUSES``: one rule per cause, the first that applies decides; its line is
``harness.regress.lines``):

1. nothing worse: ``improvement`` when the deciding figure (the wall step only on a steady
   host) is as much better, else ``ok``; a changed program that is not slower is ok; either,
   where the point's own spread alone hides a change of the threshold (z(alpha) sqrt(2) s
   beyond it), is ``unstable`` (cause ``spread``): listed apart, exit 0. A changed program
   measured slower than the threshold but within the noise is ``inconclusive`` (cause
   ``program``): the program is the cause whatever the noise (the collectives it adds and their
   exposed time lead its line), how much it costs is not told by one run a side, and the line
   says how to decide (``--repeat``, ``--confirm``); never ok beside "B is slower";
2. the program does more work per device (FLOPs, bytes, a new kind of collective) and its
   step is worse: ``regression``, cause ``program`` (more work alone is no regression: a
   recomputation that saves memory may cost nothing);
3. the CPU time per step is worse: ``regression`` (cause ``program`` when the program changed,
   else ``same program``), unless the probe's cores ran as much slower: ``inconclusive``
   (cause ``host``);
4. only the wall step (or efficiency) is worse: with the same CPU work, either other processes
   took more of the host or the program waits longer, and a probe before and after the steps
   misses loads that come and go between them: ``inconclusive`` (``host``). A CPU run without
   CPU times (saved before they were) is judged by its probe: a steady host makes it a
   ``regression``. Off CPU (no probe; the host's CPU time is not the devices' work) the wall
   step decides: ``regression``.

A regression says where the time went (``changes.where``). Two different programs (two layouts
of one model) have their ops matched by source op instead of by name, and the message opens
with the slower layout and what its extra step time is made of
(``harness.regress.side_by_side.two_layouts``): "B is 1.2x slower than A" only where the verdict
says so (a regression of the step, or an improvement), else "B measured 1.2x slower than A,
within the noise of one run a side" (``lines.within``): one verdict per pair, its headline
agreeing.
``benchmarks/bench_regress_sim.py`` measures the false alarms and the power of this rule
(docs/regression.md).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from harness import schema
from harness.record import Run
from harness.regress import changes, evidence, figures, lines, noise, side_by_side
from harness.regress.evidence import Evidence
from harness.regress.figures import worse
from harness.regress.pairs import key
from harness.regress.rule import METRICS, Rule  # noqa: F401 (METRICS read as judge.METRICS)

REGRESSION, INCONCLUSIVE, IMPROVEMENT, OK = "regression", "inconclusive", "improvement", "ok"
UNSTABLE = "unstable"  # the point's own spread hides a change of the threshold: listed apart
VERDICTS = (REGRESSION, INCONCLUSIVE, UNSTABLE, IMPROVEMENT, OK)  # worst first: the overall
PROGRAM, SAME_PROGRAM, HOST, NOISE = "program", "same program", "host", "noise"  # causes
SPREAD = "spread"  # the cause of an unstable verdict
WALL, CPU, TRACED = figures.WALL, figures.CPU, figures.TRACED  # the figure that decides


def _view(group: str, name: str) -> property:
    """``Verdict.<name>``: ``Verdict.<group>.<name>``, read as one figure of the verdict."""
    return property(lambda self: getattr(getattr(self, group), name),
                    doc=f"``{group}.{name}``")


@dataclass
class Weighed:
    """What a verdict weighed: the step's change and its p against its noise, the figure that
    decided, the noise term, the host's probe and each run's efficiency."""

    change: float       # the step (wall; two layouts: traced), candidate / baseline - 1
    p_value: float      # one-sided, of the step's slowdown against its noise
    decided: str        # the figure that decided (WALL, CPU or TRACED)
    noise: dict         # the noise term: source, figure, s, runs
    host_change: float  # the probe's speed, candidate / baseline - 1 (NaN: no probe)
    efficiency: tuple[float, float]  # each run's (harness.analysis.gaps.workload_efficiency)


@dataclass
class Differences:
    """What differs between the two runs: the program, the step figures, the ops, what ran
    where, and two different programs side by side."""

    program: dict          # changes.program
    figures: pd.DataFrame  # schema.STEP_CHANGES
    ops: pd.DataFrame      # schema.OP_CHANGES
    met: list[str] = field(default_factory=list)  # what ran where, where the runs differ
    layouts: side_by_side.Layouts | None = None  # two different programs side by side


@dataclass
class Verdict:
    """One pair's verdict, its cause and one line saying it (the decision), with what it
    weighed (``weighed``) and what differs between the runs (``differences``); each of their
    figures is read as ``Verdict.<name>`` too (``change``, ``noise``, ``ops``, ...)."""

    name: str
    baseline: Run
    candidate: Run
    verdict: str
    cause: str
    message: str
    weighed: Weighed
    differences: Differences

    change, p_value, decided, noise, host_change, efficiency = (
        _view("weighed", n) for n in ("change", "p_value", "decided", "noise", "host_change",
                                      "efficiency"))
    program, figures, ops, met, layouts = (
        _view("differences", n) for n in ("program", "figures", "ops", "met", "layouts"))

    def to_dict(self, top: int = 0) -> dict:
        def rows(df):
            return [{k: v if changes.finite(v) or not isinstance(v, float) else None
                     for k, v in r.items()} for r in df.to_dict("records")]

        return {"name": self.name, "baseline": str(self.baseline.path),
                "candidate": str(self.candidate.path), schema.VERDICT: self.verdict,
                "cause": self.cause, "message": self.message, schema.CHANGE: self.change,
                schema.P_VALUE: self.p_value, "host_change": self.host_change,
                schema.EFFICIENCY: [e if math.isfinite(e) else None for e in self.efficiency],
                "program": self.program, "differs": self.met, "decided_by": self.decided,
                "noise": {k: v for k, v in self.noise.items() if k != "said"},
                "figures": rows(self.figures),
                "ops": rows(self.ops if top <= 0 else self.ops.head(top)),
                **({"layouts": self.layouts.to_dict()} if self.layouts else {})}


@dataclass(frozen=True)
class Decision:
    """What a cause's rule decides: the verdict, its cause, and the line that says it."""

    verdict: str
    cause: str
    line: Callable[[Evidence], str]  # harness.regress.lines


# The causes, in the order they are decided (the module docstring): each rule returns its
# decision where it applies, else None; the first that applies decides.

def no_step_times(e: Evidence) -> Decision | None:
    if not math.isfinite(e.measured.step):
        return Decision(INCONCLUSIVE, NOISE, lines.no_step_times)
    return None


def unstable(e: Evidence) -> Decision | None:
    """Nothing worse, but the point's own spread alone hides a change of the threshold: listed
    apart, never ok (z(alpha) sqrt(2) s beyond it). A bimodal all-reduce judged by the constant
    was a regression in one A/A pair of four (docs/regression.md)."""
    if not e.crossed and e.unstable:
        return Decision(UNSTABLE, SPREAD, lines.unstable)
    return None


def spun_on_a_moving_host(e: Evidence) -> Decision | None:
    """More CPU time with a faster wall step on a host that moved: a load that went away, or
    threads spinning while they wait; neither figure can tell (a candidate doing 1.5x the work
    on a quiet moment often has a faster wall step than a baseline beside a load). On a steady
    host it is spinning: the wall step decides."""
    if not e.crossed and e.spun and not e.probe.steady:
        return Decision(INCONCLUSIVE, HOST, lines.spun_on_a_moving_host)
    return None


def changed_within_noise(e: Evidence) -> Decision | None:
    """A changed program measured slower beyond the threshold, within the noise: the program is
    the cause whatever the noise (it added collectives or work, or is another compile), but one
    run a side cannot tell how much it costs: inconclusive, never ok beside "B is slower" (the
    layouts story: 4 all-reduces only in B, B measured 1.2x slower, was ok)."""
    if not e.crossed and e.program_changed and e.measured_slower:
        return Decision(INCONCLUSIVE, PROGRAM, lines.changed_within_noise)
    return None


def not_worse(e: Evidence) -> Decision | None:
    """Nothing worse: an improvement where the deciding figure is as much better; a changed
    program that is not slower is ok (more work alone is no regression)."""
    if not e.crossed:
        return Decision(IMPROVEMENT if e.faster else OK,
                        PROGRAM if e.program_changed else NOISE, lines.not_worse)
    return None


# from here on the step (or the efficiency) is worse

def more_work(e: Evidence) -> Decision | None:
    """More work per device (FLOPs, bytes, a new kind of collective) and a worse step: a loop's
    trip count, a branch, another program (more work alone is no regression: a recomputation
    that saves memory may cost nothing)."""
    if e.program["more_work"]:
        return Decision(REGRESSION, SAME_PROGRAM if e.program["same_program"] else PROGRAM,
                        lines.more_work)
    return None


def slower_cores(e: Evidence) -> Decision | None:
    """More CPU time per step, but the probe's cores ran as much slower (its FLOPs per CPU
    second): the same work on slower cores."""
    if e.busier and math.isfinite(e.probe.cores) and not worse(
            e.measured.cpu - e.probe.cores, e.measured.cpu_se, e.threshold, e.alpha, e.df):
        return Decision(INCONCLUSIVE, HOST, lines.slower_cores)
    return None


def host_moved_under_it(e: Evidence) -> Decision | None:
    """The host's load changed while the candidate ran (its probes before and after it
    disagree): device threads that wait for each other spin longer while it is busier, so the
    same program's CPU time per step grew with the load, not with the program."""
    if e.busier and e.on_cpu and e.probe.moving and not e.program_changed:
        return Decision(INCONCLUSIVE, HOST, lines.host_moved_under_it)
    return None


def host_moved(e: Evidence) -> Decision | None:
    """Only the wall step (or efficiency) is worse: with the same CPU work, other processes took
    more of the host or the program waits longer, and a probe before and after the steps misses
    loads that come and go between them (A/A pairs whose wall step alone moved 1.4-3.9x with
    the probe unmoved were called regressions before); a CPU run without CPU times, by its
    probe."""
    if not e.traced and not e.busier and e.measured.decided == CPU:
        return Decision(INCONCLUSIVE, HOST, lines.same_cpu_work)
    if not e.traced and not e.busier and e.on_cpu and not e.probe.steady:
        return Decision(INCONCLUSIVE, HOST, lines.host_moved)
    return None


def slower(e: Evidence) -> Decision:
    """Worse, and nothing above explains it: a regression of the program, or of the same program
    (off CPU, the wall step decides: no probe, and the host's CPU time is not the devices')."""
    return Decision(REGRESSION, PROGRAM if e.program_changed else SAME_PROGRAM, lines.slower)


CAUSES: tuple[Callable[[Evidence], Decision | None], ...] = (
    no_step_times, unstable, spun_on_a_moving_host, changed_within_noise, not_worse, more_work,
    slower_cores, host_moved_under_it, host_moved, slower)


def compare(a: Run, b: Run, rule: Rule = Rule(), layouts_first: bool = False,
            spread: noise.Spread | None = None,
            reps: tuple[list[Run], list[Run]] | None = None, student: bool = False) -> Verdict:
    """The verdict of candidate ``b`` against baseline ``a`` (the module docstring), with the
    point's own ``spread`` where known; ``reps``: each side's runs of one code (``a`` and ``b``
    among them: a sweep's repeats, a candidate's confirmations), judged by their means;
    ``student``: the spread is measured from those few runs (a confirmation), so a change is
    weighed by Student's t (``figures.tail``).
    ``layouts_first``: two runs named as two layouts of one
    model: when their programs differ, the message opens with the slower one (else the cause
    opens it, the layouts' line after)."""
    e = evidence.gather(a, b, rule, spread, reps, student)
    d = next(d for d in (cause(e) for cause in CAUSES) if d is not None)
    f, lay = e.measured, e.layouts
    if lay is not None:  # the headline says slower only where the verdict does (or faster)
        told = d.verdict == IMPROVEMENT or (d.verdict == REGRESSION and "step" in e.crossed)
        lay = dataclasses.replace(lay, headline=lay.line("" if told else lines.within(e)))
    return Verdict(key(b), a, b, d.verdict, d.cause,
                   lines.with_layouts(d.line(e), lay, layouts_first),
                   Weighed(math.expm1(f.step), e.p_value, f.decided, f.noise,
                           math.expm1(-e.probe.speed), e.efficiency),
                   Differences(e.program, e.step_figures, e.ops, changes.met(a, b), lay))


def overall(verdicts: list[Verdict]) -> str:
    """The worst verdict of all pairs (``VERDICTS`` order); ok for none."""
    found = {v.verdict for v in verdicts}
    return next((v for v in VERDICTS if v in found), OK)
