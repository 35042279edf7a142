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
verdict says which (``Verdict.noise``). A change is **worse** when beyond its ``--fail-on``
threshold (default step=10%) and one-sided significant at ``alpha`` (0.01). The figure that
decides (``Verdict.decided``): the CPU time per step on CPU (where both runs have it), else the
wall step; two layouts of one model (two programs side by side), the traced step, the step their
headline breaks down, so that the headline and the verdict never disagree. More CPU time per
step never decides when the wall step got faster (threads spinning while they wait burn CPU
time without lengthening the step). The verdicts (``VERDICTS``), in the order they are decided:

1. nothing worse: ``improvement`` when the deciding figure (the wall step only on a steady
   host) is as much better, else ``ok``; a changed program that is not slower is ok; either,
   where the point's own spread alone hides a change of the threshold (z(alpha) sqrt(2) s
   beyond it), is ``unstable`` (cause ``spread``): listed apart, exit 0;
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
with the slower layout and what its extra step time is made of (``harness.regress.side_by_side``).
``benchmarks/bench_regress_sim.py`` measures the false alarms and the power of this rule
(docs/regression.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.gaps import workload_efficiency
from harness.chip import drift
from harness.errors import HarnessError
from harness.regress import changes, figures, noise, side_by_side
from harness.regress.pairs import key
from harness.runs.run import Run

REGRESSION, INCONCLUSIVE, IMPROVEMENT, OK = "regression", "inconclusive", "improvement", "ok"
UNSTABLE = "unstable"  # the point's own spread hides a change of the threshold: listed apart
VERDICTS = (REGRESSION, INCONCLUSIVE, UNSTABLE, IMPROVEMENT, OK)  # worst first: the overall
PROGRAM, SAME_PROGRAM, HOST, NOISE = "program", "same program", "host", "noise"  # causes
SPREAD = "spread"  # the cause of an unstable verdict
WALL, CPU, TRACED = figures.WALL, figures.CPU, figures.TRACED  # the figure that decides
METRICS = {"step": "the step slower by more than this",  # --fail-on METRIC=PCT
           "efficiency": "the roofline efficiency lower by more than this"}


@dataclass(frozen=True)
class Rule:
    """When a change counts (the module docstring)."""

    fail_on: tuple[tuple[str, float], ...] = (("step", 0.10),)
    alpha: float = 0.01  # one-sided level of each test
    host: float = 0.10   # the probe's speed moving more than this: a host that moved
    noise: float = 0.05  # run-to-run sd of a log median step (CPU time: 0.039 measured)

    def __post_init__(self):
        for name, value in self.fail_on:
            if name not in METRICS:
                raise HarnessError(f"--fail-on {name}: unknown; valid: {', '.join(METRICS)}")
            if not 0 <= value < 10:
                raise HarnessError(f"--fail-on {name}={value:g}: must be in [0, 10) (0.1 = 10%)")
        for name, ok, valid in (("alpha", 0 < self.alpha < 1, "in (0, 1)"),
                                ("host", self.host >= 0, ">= 0 (0.1 = 10%)"),
                                ("noise", self.noise >= 0, ">= 0")):
            if not ok:
                raise HarnessError(f"{name} must be {valid}, got {getattr(self, name)}")


@dataclass
class Verdict:
    """One pair's verdict, its cause and one line saying it, with the figures behind it."""

    name: str
    baseline: Run
    candidate: Run
    verdict: str
    cause: str
    message: str
    change: float       # the wall step, candidate / baseline - 1
    p_value: float      # one-sided, of the wall step's slowdown against its noise
    host_change: float  # the probe's speed, candidate / baseline - 1 (NaN: no probe)
    efficiency: tuple[float, float]  # each run's (harness.analysis.gaps.workload_efficiency)
    program: dict       # changes.program
    figures: pd.DataFrame  # schema.STEP_CHANGES
    ops: pd.DataFrame      # schema.OP_CHANGES
    met: list[str] = field(default_factory=list)  # what ran where, where the runs differ
    layouts: side_by_side.Layouts | None = None  # two different programs side by side
    decided: str = WALL  # the figure that decided (WALL, CPU or TRACED)
    noise: dict = field(default_factory=dict)  # the noise term: source, figure, s, runs

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


def tail(z: float, df: float = math.inf) -> float:
    """The one-sided p of a change ``z`` standard errors out (``figures.distribution``: Student's
    t with ``df`` degrees of freedom, else the normal). Three runs a side whose spread pools to
    s put a change of 3.7 s/sqrt(1.5) at p = 0.010 with 4 degrees of freedom, where the normal
    says 0.0001: an A/A pair of one commit's sweeps, a CPU all-reduce at 302-326 us in three
    runs and 346-488 us in three, read as a confirmed regression."""
    return float(figures.distribution(df).sf(z))


def worse(r: float, se: float, threshold: float, alpha: float, df: float = math.inf) -> bool:
    """A log change beyond ``threshold`` and beyond its noise at one-sided level ``alpha``
    (``tail``: ``df`` degrees of freedom)."""
    return r > math.log1p(threshold) and tail(r / se if se > 0 else math.inf, df) <= alpha


def host(run: Run) -> dict:
    """The run's probe (NaN without one): ``speed``, its median FLOP/s before and after;
    ``moved``, the log of before over after; ``cores``, its median FLOPs per CPU second."""
    d = run.meta.get(drift.HOST_DRIFT) or {}
    rates = d.get(drift.RATES) or [[x] for x in d.get(drift.REFERENCE) or ()]  # older: the best
    cpu = d.get(drift.CPU_RATES) or []
    out = dict(speed=math.nan, moved=math.nan, cores=math.nan)
    if len(rates) == 2 and rates[0] and rates[1]:
        out.update(speed=float(np.median(rates[0] + rates[1])),
                   moved=math.log(float(np.median(rates[0])) / float(np.median(rates[1]))))
    if len(cpu) == 2:
        out.update(cores=float(np.nanmedian(cpu[0] + cpu[1])))
    return out


def _probe(a: Run, b: Run, rule: Rule) -> tuple[float, float, bool, bool, bool, str]:
    """(h, cores: the log of the baseline's probe speed and cores' speed over the candidate's,
    > 0 where the candidate's ran slower; probed; steady: the probe moved less than
    ``rule.host``; moving: the candidate's own probes, before and after its steps, moved more
    than that; the line that says it)."""
    ha, hb = host(a), host(b)
    h, cores = (figures.log_ratio(ha[x], hb[x]) for x in ("speed", "cores"))
    probed = math.isfinite(h)
    steady = probed and max(abs(h), abs(ha["moved"]), abs(hb["moved"])) <= math.log1p(rule.host)
    moving = abs(hb["moved"]) > math.log1p(rule.host)  # NaN (no probe): False
    seen = (f"host speed {math.expm1(-h):+.0%} (probe; {math.expm1(-hb['moved']):+.0%} "
            "during the candidate)" if probed else "no host speed probe")
    return h, cores, probed, steady, moving, seen


def compare(a: Run, b: Run, rule: Rule = Rule(), layouts_first: bool = False,
            spread: noise.Spread | None = None,
            reps: tuple[list[Run], list[Run]] | None = None, student: bool = False) -> Verdict:
    """The verdict of candidate ``b`` against baseline ``a`` (the module docstring), with the
    point's own ``spread`` where known; ``reps``: each side's runs of one code (``a`` and ``b``
    among them: a sweep's repeats, a candidate's confirmations), judged by their means;
    ``student``: the spread is measured from those few runs (a confirmation), so a change is
    weighed by Student's t (``tail``).
    ``layouts_first``: two runs named as two layouts of one
    model: when their programs differ, the message opens with the slower one (else the cause
    opens it, the layouts' line after)."""
    fail_on, alpha, t = dict(rule.fail_on), rule.alpha, min(rule.fail_on, key=lambda x: x[1])[1]
    side = side_by_side.compare(a, b)
    traced = side is not None and all(math.isfinite(side_by_side.step_of(x, schema.STEP_S))
                                      for x in (a, b))
    f = figures.measure(a, b, rule.noise, spread, traced, reps, student)
    r, se, k, se_k = f.r, f.se, f.k, f.se_k
    h, cores, probed, steady, moving, seen = _probe(a, b, rule)
    eff = workload_efficiency(a.ops), workload_efficiency(b.ops)
    x = {"step": r, "efficiency": figures.log_ratio(*eff)}
    df = f.noise.get("df") or math.inf  # the point's own spread's; None: a constant's
    crossed = {m: v for m, v in fail_on.items() if worse(x[m], se, v, alpha, df)}
    # more CPU time per step, which never decides when the wall step got faster (threads that
    # spin while they wait burn CPU time without lengthening the step)
    spun = worse(k, se_k, t, alpha, df) and math.isfinite(r) and r < 0
    busier = worse(k, se_k, t, alpha, df) and not spun
    if "step" in fail_on and busier and worse(k, se_k, fail_on["step"], alpha, df):
        crossed.setdefault("step", fail_on["step"])
    prog, figs = changes.program(a, b), changes.figures(a, b)
    ops = side.ops[list(schema.OP_CHANGES)] if side else changes.ops(a, b)
    p = tail(r / se, df) if se > 0 else float(r <= 0)
    stats = figures.stats(f, p, spun)
    changed = changes.said(prog)
    shaky = figures.unstable(f.noise["s"] if f.noise["source"] == noise.OWN else math.nan,
                             fail_on.get("step", t), alpha, f.noise["replicates"], df)

    def verdict(v: str, cause: str, message: str) -> Verdict:
        if side and layouts_first:
            message = f"{side.headline}. {message[:1].upper()}{message[1:]}"
        elif side:
            message = f"{message}. {side.headline}"
        return Verdict(key(b), a, b, v, cause, message, math.expm1(r), p, math.expm1(-h),
                       eff, prog, figs, ops, changes.met(a, b), side, f.decided, f.noise)

    if not math.isfinite(r):
        return verdict(INCONCLUSIVE, NOISE, stats)
    if not crossed:
        faster = (worse(-k, se_k, t, alpha, df) if f.decided == CPU
                  else worse(-r, se, t, alpha, df) and (steady or not probed or traced))
        if shaky:
            why = figures.shaky(f, fail_on.get("step", t))
            return verdict(UNSTABLE, SPREAD, f"{changed}{why}: {stats}; {seen}")
        if spun and not steady:  # a load that went away, or threads spinning: cannot tell
            return verdict(INCONCLUSIVE, HOST, f"{changed}{stats}: the CPU time per step grew "
                                               "while the wall step got faster, on a host that "
                                               f"moved ({seen}): rerun on a steady host to tell")
        return verdict(IMPROVEMENT if faster else OK, PROGRAM if changed else NOISE,
                       f"{changed}{'faster' if faster else 'not slower beyond noise'}: "
                       f"{stats}; {seen}")
    mesh = b.meta.get(schema.MESH) if isinstance(b.meta.get(schema.MESH), dict) else None
    there = changes.where(figs, ops, mesh) if len(ops) else ""
    there = f"; {there}" if there else ""
    if prog["more_work"]:  # more work per step: a loop's trip count, a branch, another program
        cause, what = ((SAME_PROGRAM, "the same program (fingerprint) did more work per step")
                       if prog["same_program"] else (PROGRAM, "the program does more work"))
        return verdict(REGRESSION, cause, f"{what}: {prog['what']}; {stats}{there}")
    if busier and math.isfinite(cores) and not worse(k - cores, se_k, t, alpha, df):
        return verdict(INCONCLUSIVE, HOST, f"{stats}, but the host's cores ran as much slower "
                                           f"({math.expm1(-cores):+.0%}: the probe's FLOPs per "
                                           "CPU second): rerun on a steady host to tell")
    cpu_run = str(b.meta.get(schema.DEVICE_KIND, "")).lower() == "cpu"
    if busier and cpu_run and moving and not changed:
        # the host's load changed while the candidate ran (its probes before and after it
        # disagree): device threads that wait for each other spin longer while it is busier,
        # so the same program's CPU time per step grew with the load, not with the program
        return verdict(INCONCLUSIVE, HOST, f"{stats}: the same program took more CPU time per "
                                           f"step while the host moved under it ({seen}): its "
                                           "device threads wait longer, spinning, on a busier "
                                           "host; rerun on a steady host to tell")
    if not traced and not busier and (f.decided == CPU or (cpu_run and not steady)):
        return verdict(INCONCLUSIVE, HOST, f"{stats}: " + (
            "the same CPU work per step: other processes took more of the host, or the program "
            "waits longer (idle, exposed communication), which the wall step alone cannot tell"
            if f.decided == CPU else "the host moved, as much as the step can tell")
            + f" ({seen})")
    lost = ", ".join(f"{'slower' if m == 'step' else 'less efficient'} by "
                     f"{math.expm1(max(x[m], k) if m == 'step' and busier else x[m]):.0%}"
                     for m in crossed) + (" (more CPU time per step)" if busier else
                                          f" (the {TRACED})" if traced else "")
    return verdict(REGRESSION, PROGRAM if changed else SAME_PROGRAM,
                   f"{changed or 'same program, '}{lost}: {stats}; {seen}{there}")


def overall(verdicts: list[Verdict]) -> str:
    """The worst verdict of all pairs (``VERDICTS`` order); ok for none."""
    found = {v.verdict for v in verdicts}
    return next((v for v in VERDICTS if v in found), OK)
