"""The figures a pair of runs is judged by (``harness.regress.judge``): per-step samples, the log
change of their medians and its standard error, which figure decides, the noise term (the
point's own spread, ``harness.regress.noise``, else the constant) and the tests a change is
weighed by (``tail``, ``worse``, ``unstable``); the lines that say them are
``harness.regress.lines``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm, t

from harness import schema
from harness.record import Run
from harness.regress import noise, side_by_side

MEDIAN_SE, MAD_TO_SIGMA = 1.2533, 1.4826  # a median's s.e. in sigmas x root n; sigma per MAD
WALL, CPU, TRACED = "wall step", "CPU time per step", "traced step"  # the figure that decides


def samples(run: Run, name: str, wall: bool = True) -> np.ndarray:
    """The run's positive per-step times under meta ``name``; without wall times (a trace
    captured elsewhere), or ``wall`` False, the per-step sums of its ops' measured times."""
    times = np.asarray([t for t in run.meta.get(name) or () if t and t > 0], float)
    if (len(times) and wall) or name != schema.STEP_TIMES_S or run.steps is None \
            or run.steps.empty:
        return times
    return run.steps.groupby(schema.STEP)[schema.MEASURED_S].sum().to_numpy(float)


def _walls(run: Run) -> bool:
    return any(t and t > 0 for t in run.meta.get(schema.STEP_TIMES_S) or ())


def _median_se(x: np.ndarray) -> float:
    """The standard error of the log median of steps ``x``, from their robust sigma (MAD)."""
    d = np.log(x) - np.median(np.log(x))
    return MEDIAN_SE * MAD_TO_SIGMA * float(np.median(np.abs(d))) / math.sqrt(len(x))


def change(a: list[np.ndarray], b: list[np.ndarray], noise: float, own: bool = False
           ) -> tuple[float, float]:
    """(log change of side ``b`` over side ``a``, its standard error); NaN without both. A side
    is one run's per-step samples or several runs' (replicates of one code: ``harness sweep
    --repeat``, confirmations); its figure is the mean over its runs of the log median step.
    ``noise``: the run-to-run sd of a run's log median, added to the medians' own errors;
    ``own``: a point's measured spread between runs, which holds them (the error is
    ``noise`` sqrt(1/n_a + 1/n_b), never under the medians' own)."""
    a, b = [x for x in a if len(x)], [x for x in b if len(x)]
    if not a or not b:
        return math.nan, math.nan

    def side(runs):  # (mean log median, the variance of that mean from the steps alone)
        return (float(np.mean([math.log(float(np.median(x))) for x in runs])),
                sum(_median_se(x) ** 2 for x in runs) / len(runs) ** 2)

    (ma, va), (mb, vb) = side(a), side(b)
    runs = noise ** 2 * (1 / len(a) + 1 / len(b))
    return mb - ma, math.sqrt(max(va + vb, runs) if own else va + vb + runs)


def log_ratio(x: float, y: float) -> float:
    return math.log(x / y) if x > 0 and y > 0 else math.nan


@dataclass
class Figures:
    """What a pair is judged by: the figure that decides (``decided``: ``WALL``, ``CPU`` or
    ``TRACED``), the log change of the step by it (``step``, its standard error ``step_se``)
    and of the CPU time per step (``cpu``, ``cpu_se``; NaN where it does not decide), the wall
    step's samples of each side (``walls_a``, ``walls_b``) and the noise term used (``noise``:
    source, figure, s, runs)."""

    decided: str
    step: float
    step_se: float
    cpu: float
    cpu_se: float
    walls_a: np.ndarray
    walls_b: np.ndarray
    noise: dict


def measure(a: Run, b: Run, constant: float, spread: noise.Spread | None, traced: bool,
            reps: tuple[list[Run], list[Run]] | None = None, student: bool = False) -> Figures:
    """The figures of the pair, each side ``a`` with its replicates (``reps``: the side's runs
    of one code, ``a`` and ``b`` among them; default ``a`` and ``b`` alone).
Two layouts (``traced``) are judged by the traced step, the
    step their line breaks down (``side_by_side``); else by the CPU time per step where both
    runs have it, the wall step where not. The noise term is the point's own spread of that
    figure (``harness.regress.noise``) where runs of the same code give one, else
    ``constant``; ``student``: that spread was measured from the judged runs themselves, whose
    degrees of freedom the noise term records (``tail``)."""
    ra, rb = reps or ([a], [b])
    wall = all(_walls(x) for x in (*ra, *rb))  # else both sides' op sums: one measure for both
    wa, wb = ([samples(x, schema.STEP_TIMES_S, wall) for x in side] for side in (ra, rb))
    ca, cb = ([samples(x, schema.STEP_CPU_TIMES_S) for x in side] for side in (ra, rb))
    decided = TRACED if traced else CPU if all(len(x) for x in (*ca, *cb)) else WALL
    if decided == CPU and spread is not None and spread.wall < spread.cpu:
        decided = WALL  # the CPU time spreads wider between runs than the wall step: the
        #                 figure that tells a change from noise sooner decides
    s = spread.of(decided == CPU) if spread is not None else math.nan
    own = math.isfinite(s)
    term = s if own else constant
    r, se = change(wa, wb, spread.wall if own else term, own)
    k, se_k = change(ca, cb, term, own) if decided == CPU else (math.nan, math.nan)
    if traced:
        ta, tb = (side_by_side.step_of(x, schema.STEP_S) for x in (a, b))
        _, se_t = change(*([samples(x, schema.TRACED_STEP_TIMES_S) for x in side]
                           for side in (ra, rb)), term, own)
        r, se = log_ratio(tb, ta), se_t if math.isfinite(se_t) else math.sqrt(2) * term
    # the pooled spread's degrees of freedom, where the judged runs measured it (``student``)
    df = spread.runs - spread.groups if own and student else None
    said = (f"this point's own spread, s={s:.3g} ({decided}) from {spread.runs} runs of the "
            f"same code{f' (Student t, {df} degrees of freedom)' if df else ''}" if own else
            f"the constant {constant:g} (fewer than {noise.MIN_RUNS} runs of the same code)")
    if len(ra) > 1 or len(rb) > 1:
        said += f"; {len(ra)} run(s) of the baseline, {len(rb)} of the candidate"
    return Figures(decided, r, se, k, se_k, np.concatenate(wa), np.concatenate(wb),
                   {"source": noise.OWN if own else noise.CONSTANT, "figure": decided,
                    "s": term, "runs": spread.runs if own else 0, "said": said,
                    "replicates": (len(ra), len(rb)), "df": df})


def distribution(df: float = math.inf):
    """What a change in standard errors is weighed by: Student's t with ``df`` degrees of
    freedom where the noise is a spread measured from the judged runs themselves (a
    confirmation: ``Figures.noise``, runs less groups; ``tail``), else the normal."""
    return t(df) if math.isfinite(df) else norm


def unstable(s: float, threshold: float, alpha: float, replicates: tuple[int, int] = (1, 1),
             df: float = math.inf) -> bool:
    """A spread that alone hides a change of ``threshold``: z(alpha) s sqrt(1/n_a + 1/n_b)
    beyond it (one run a side: z(alpha) sqrt(2) s), with n the runs of each side; z from
    ``distribution(df)``."""
    na, nb = replicates
    z = distribution(df).isf(alpha)
    return math.isfinite(s) and z * s * math.sqrt(1 / na + 1 / nb) > math.log1p(threshold)


def tail(z: float, df: float = math.inf) -> float:
    """The one-sided p of a change ``z`` standard errors out (``distribution``: Student's t with
    ``df`` degrees of freedom, else the normal). Three runs a side whose spread pools to s put a
    change of 3.7 s/sqrt(1.5) at p = 0.010 with 4 degrees of freedom, where the normal says
    0.0001: an A/A pair of one commit's sweeps, a CPU all-reduce at 302-326 us in three runs and
    346-488 us in three, read as a confirmed regression."""
    return float(distribution(df).sf(z))


def worse(r: float, se: float, threshold: float, alpha: float, df: float = math.inf) -> bool:
    """A log change beyond ``threshold`` and beyond its noise at one-sided level ``alpha``
    (``tail``: ``df`` degrees of freedom)."""
    return r > math.log1p(threshold) and tail(r / se if se > 0 else math.inf, df) <= alpha
