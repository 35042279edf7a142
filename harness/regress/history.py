"""Each point's series over nights, from the runs kept under a root of nights.

ROOT holds one directory per night (a sweep's directory, ``harness sweep --out``; a pytest
``--harness-save`` directory; any directory of the night's runs): every run under one of them
is of that night, its repeats (``harness sweep --repeat N``) and confirmations (reruns stored
in it) included; a run directly in ROOT is of the night of its date and commit. A point is what
``harness compare`` pairs (``pairs.key``: workload, preset, overrides and mesh; or pytest test).

Per point and night (``Night``): the commit and date, the runs pooled, and the figures: the
median wall step, the median CPU time per step, the roofline efficiency, and the value the
change points are placed on: the log of the median CPU time per step where every night of the
point has CPU times (the work of a step on a shared CPU host, ``harness.regress.judge``), else of
the median wall step; averaged over the night's runs. Its uncertainty (``Series.variance``): the
run-to-run term ``s^2``, estimated from the series itself (half the robust variance of the
differences between successive nights, less the runs' own error), plus the mean squared error of
the runs' medians (``figures.MEDIAN_SE``), over the night's runs: a night of k runs counts k
times one of one.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import schema
from harness.analysis.gaps import workload_efficiency
from harness.record import Run
from harness.regress import noise, pairs
from harness.regress.figures import CPU, MAD_TO_SIGMA, MEDIAN_SE, WALL

MIN_NIGHTS = noise.MIN_RUNS  # nights of a segment before their spread replaces the constant


@dataclass
class Night:
    """One point's runs of one night, and their figures (the module docstring)."""

    name: str
    runs: list[Run]
    commit: str = ""
    date: str = ""
    wall: float = math.nan        # median wall step (s), the median over the runs
    cpu: float = math.nan         # median CPU time per step (s)
    efficiency: float = math.nan  # roofline efficiency, the mean over the runs
    value: float = math.nan       # log of the deciding figure, the mean over the runs
    error: float = math.nan       # the runs' own error of that log median, root mean square
    spread: float = math.nan      # SD of the runs' log medians (two or more runs)

    @property
    def newest(self) -> Run:
        return max(self.runs, key=lambda r: str(r.meta.get(schema.TIME, "")))


@dataclass
class Series:
    """A point's nights, oldest first, and the figure its values are of (``CPU`` or ``WALL``)."""

    key: str
    nights: list[Night]
    figure: str = WALL
    s: float = math.nan  # the run-to-run term of one run's log median (the module docstring)
    variance: list[float] = field(default_factory=list)  # of each night's value

    @property
    def values(self) -> np.ndarray:
        return np.array([n.value for n in self.nights], float)

    @property
    def weights(self) -> np.ndarray:
        v = np.asarray(self.variance, float)
        return np.where(v > 0, 1 / np.where(v > 0, v, 1), 1.0) if len(v) else np.ones(0)


def night_of(run: Run, root: Path) -> str:
    """The night a run is of: the directory under ``root`` it is in, else its date and commit."""
    rel = run.path.resolve().relative_to(root.resolve()) if run.path is not None else Path()
    if len(rel.parts) > 1:
        return rel.parts[0]
    m = run.meta
    return f"{str(m.get(schema.TIME, ''))[:10]} {str(m.get(schema.GIT_SHA, ''))[:12]}".strip()


def _log_median(run: Run, name: str) -> tuple[float, float]:
    """(log of the median of meta ``name``'s positive times, its error); NaNs without any."""
    t = np.asarray([x for x in run.meta.get(name) or () if x and x > 0], float)
    if not len(t):
        return math.nan, math.nan
    d = np.log(t) - np.median(np.log(t))
    return math.log(float(np.median(t))), (MEDIAN_SE * MAD_TO_SIGMA
                                           * float(np.median(np.abs(d))) / math.sqrt(len(t)))


def night(name: str, runs: list[Run], figure: str) -> Night:
    """The night ``name`` of a point from its ``runs``, its value of ``figure`` (``CPU`` or
    ``WALL``)."""
    runs = sorted(runs, key=lambda r: str(r.meta.get(schema.TIME, "")))
    deciding = schema.STEP_CPU_TIMES_S if figure == CPU else schema.STEP_TIMES_S
    logs = [_log_median(r, deciding) for r in runs]
    vals = [v for v, _ in logs if math.isfinite(v)]
    errs = [e for _, e in logs if math.isfinite(e)]
    meds = {k: [math.exp(v) for v, _ in (_log_median(r, k) for r in runs) if math.isfinite(v)]
            for k in (schema.STEP_TIMES_S, schema.STEP_CPU_TIMES_S)}
    effs = [e for e in (workload_efficiency(r.ops) if schema.PREDICTED_S in r.ops else math.nan
                        for r in runs) if math.isfinite(e)]
    newest = runs[-1].meta
    return Night(name, runs, str(newest.get(schema.GIT_SHA) or ""),
                 str(runs[0].meta.get(schema.TIME, ""))[:19],
                 *(float(np.median(meds[k])) if meds[k] else math.nan
                   for k in (schema.STEP_TIMES_S, schema.STEP_CPU_TIMES_S)),
                 float(np.mean(effs)) if effs else math.nan,
                 float(np.mean(vals)) if vals else math.nan,
                 math.sqrt(float(np.mean(np.square(errs)))) if errs else math.nan,
                 float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan)


def run_to_run(values: np.ndarray, errors: np.ndarray) -> float:
    """The run-to-run SD of one run's log median, from a series of single-night values: half
    the robust variance of successive differences (a step between nights moves one difference,
    not the spread), less the runs' own squared error; 0 where that leaves nothing."""
    v = values[np.isfinite(values)]
    if len(v) < 3:
        return math.nan
    d = np.diff(v)
    total = (MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d))))) ** 2 / 2
    own = float(np.nanmean(np.square(errors))) if np.isfinite(errors).any() else 0.0
    return math.sqrt(max(total - own, 0.0))


def series(runs: list[Run], root: Path) -> dict[str, Series]:
    """Per point (``pairs.key``), its series over the nights ``runs`` are of (each run's step
    program, ``pairs.step_program``), nights in order of their first run's time."""
    grouped: dict[str, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        grouped[pairs.key(r)][night_of(r, root)].append(pairs.step_program(r))
    out = {}
    for k, by_night in sorted(grouped.items()):
        cpu = all(any(r.meta.get(schema.STEP_CPU_TIMES_S) for r in rs) for rs in by_night.values())
        figure = CPU if cpu else WALL
        nights = sorted((night(n, rs, figure) for n, rs in by_night.items()),
                        key=lambda n: (n.date, n.name))
        out[k] = series_of(k, nights, figure)
    return out


def series_of(key: str, nights: list[Night], figure: str) -> Series:
    """The series of ``nights`` with its run-to-run term and each night's variance."""
    vals = np.array([n.value for n in nights], float)
    errs = np.array([n.error for n in nights], float)
    s = run_to_run(vals, errs)
    own = [n.spread for n in nights if math.isfinite(n.spread)]  # repeats measure it directly
    if own and not math.isfinite(s):
        s = float(np.sqrt(np.mean(np.square(own))))
    base = s ** 2 if math.isfinite(s) else 0.0
    var = [(base + (n.error ** 2 if math.isfinite(n.error) else 0.0)) / max(len(n.runs), 1)
           for n in nights]
    return Series(key, nights, figure, s, var)


def load(root: str | Path) -> dict[str, Series]:
    """Every point's series from the runs under ``root`` (``pairs.runs_under``)."""
    return series(pairs.runs_under(root), Path(root))

