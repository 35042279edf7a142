"""What a pair of runs is judged by, gathered once (``harness.regress.judge`` decides from it,
``harness.regress.lines`` says it): the step's change by the figure that decides and its noise
(``figures.measure``), the host speed probe of each run (``host``), each run's efficiency, what
changed in the program, the step figures and the ops, two layouts side by side where the
programs differ (``side_by_side.two_layouts``), and which changes are worse (``figures.worse``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.gaps import workload_efficiency
from harness.chip import drift
from harness.record import Run
from harness.regress import changes, figures, noise, side_by_side
from harness.regress.figures import worse

if TYPE_CHECKING:
    from harness.regress.rule import Rule


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


@dataclass(frozen=True)
class Probe:
    """The two runs' probes (``host``), each a log of the baseline's over the candidate's, > 0
    where the candidate's ran slower: ``speed`` (NaN: no probe), ``cores`` (FLOPs per CPU
    second, the cores' own speed); ``candidate_moved``, the log of the candidate's probe before
    its steps over after; ``steady``: every one of them moved less than ``Rule.host``;
    ``moving``: the candidate's own probes, before and after its steps, moved more than that."""

    speed: float
    cores: float
    candidate_moved: float
    steady: bool
    moving: bool

    @property
    def probed(self) -> bool:
        return math.isfinite(self.speed)


def probe(a: Run, b: Run, host_moves: float) -> Probe:
    """The probes of baseline ``a`` and candidate ``b``; a host moves beyond ``host_moves``
    (``Rule.host``: 0.1, 10%)."""
    ha, hb = host(a), host(b)
    speed, cores = (figures.log_ratio(ha[x], hb[x]) for x in ("speed", "cores"))
    limit = math.log1p(host_moves)
    steady = math.isfinite(speed) and max(abs(speed), abs(ha["moved"]), abs(hb["moved"])) <= limit
    return Probe(speed, cores, hb["moved"], steady,
                 moving=abs(hb["moved"]) > limit)  # NaN (no probe): False


@dataclass(frozen=True)
class Evidence:
    """A pair's figures and what they say, for the rules (``judge.CAUSES``) and their lines."""

    baseline: Run
    candidate: Run
    layouts: side_by_side.Layouts | None  # two different programs side by side
    traced: bool                # judged by the traced step: two layouts that both have it
    measured: figures.Figures   # the step's change by the figure that decides, its noise
    probe: Probe
    efficiency: tuple[float, float]  # each run's (harness.analysis.gaps.workload_efficiency)
    program: dict               # changes.program: what changed in the compiled program
    step_figures: pd.DataFrame  # changes.figures: schema.STEP_CHANGES
    ops: pd.DataFrame           # schema.OP_CHANGES (two layouts: their op groups)
    p_value: float              # one-sided, of the step's slowdown against its noise
    # the rule as it applies to this pair
    alpha: float
    threshold: float            # the smallest --fail-on threshold
    step_threshold: float       # the step's (else the smallest)
    df: float                   # the degrees of freedom of the noise (inf: the normal)
    # what the figures say (``figures.worse``)
    log_changes: dict           # metric -> its log change ("step", "efficiency")
    crossed: dict               # metric -> threshold: the metrics worse beyond theirs
    spun: bool                  # more CPU time per step while the wall step got faster
    busier: bool                # more CPU time per step, the wall step not faster
    faster: bool                # the deciding figure better beyond the threshold and noise
    unstable: bool              # the point's own spread alone hides a change of the threshold

    @property
    def program_changed(self) -> bool:
        return bool(self.program["changed"])

    @property
    def measured_slower(self) -> bool:
        """The step measured slower than the step threshold, significant or not."""
        return self.measured.step > math.log1p(self.step_threshold)

    @property
    def on_cpu(self) -> bool:
        """The candidate ran on the host's CPU, whose probe measures its devices."""
        return str(self.candidate.meta.get(schema.DEVICE_KIND, "")).lower() == "cpu"


def gather(a: Run, b: Run, rule: Rule, spread: noise.Spread | None = None,
           reps: tuple[list[Run], list[Run]] | None = None, student: bool = False) -> Evidence:
    """The evidence on candidate ``b`` against baseline ``a`` (``judge.compare``'s arguments)."""
    fail_on, alpha = dict(rule.fail_on), rule.alpha
    threshold = min(rule.fail_on, key=lambda x: x[1])[1]
    layouts = side_by_side.two_layouts(a, b)
    traced = layouts is not None and all(
        math.isfinite(side_by_side.step_of(x, schema.STEP_S)) for x in (a, b))
    f = figures.measure(a, b, rule.noise, spread, traced, reps, student)
    eff = workload_efficiency(a.ops), workload_efficiency(b.ops)
    log_changes = {"step": f.step, "efficiency": figures.log_ratio(*eff)}
    df = f.noise.get("df") or math.inf  # the point's own spread's; None: a constant's
    crossed = {m: v for m, v in fail_on.items() if worse(log_changes[m], f.step_se, v, alpha, df)}
    # more CPU time per step never decides when the wall step got faster (threads that spin
    # while they wait burn CPU time without lengthening the step)
    more_cpu = worse(f.cpu, f.cpu_se, threshold, alpha, df)
    spun = more_cpu and math.isfinite(f.step) and f.step < 0
    busier = more_cpu and not spun
    if "step" in fail_on and busier and worse(f.cpu, f.cpu_se, fail_on["step"], alpha, df):
        crossed.setdefault("step", fail_on["step"])
    p = probe(a, b, rule.host)
    # better: by the CPU time where it decides, else by the wall step on a steady host only
    # (a load that went away makes any step faster), or by the traced step of two layouts
    faster = (worse(-f.cpu, f.cpu_se, threshold, alpha, df) if f.decided == figures.CPU
              else worse(-f.step, f.step_se, threshold, alpha, df)
              and (p.steady or not p.probed or traced))
    own = f.noise["s"] if f.noise["source"] == noise.OWN else math.nan
    return Evidence(
        a, b, layouts, traced, f, p, eff, changes.program(a, b), changes.figures(a, b),
        layouts.ops[list(schema.OP_CHANGES)] if layouts else changes.ops(a, b),
        figures.tail(f.step / f.step_se, df) if f.step_se > 0 else float(f.step <= 0),
        alpha, threshold, fail_on.get("step", threshold), df, log_changes, crossed, spun,
        busier, faster, figures.unstable(own, fail_on.get("step", threshold), alpha,
                                         f.noise["replicates"], df))
