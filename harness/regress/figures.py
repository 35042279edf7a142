"""The figures a pair of runs is judged by (``harness.regress.judge``): per-step samples, the log
change of their medians and its standard error, which figure decides, the noise term (the
point's own spread, ``harness.regress.noise``, else the constant) and the lines that say them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from harness import schema
from harness.regress import noise, side_by_side
from harness.runs.run import Run
from harness.units import fmt_seconds

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


def change(a: np.ndarray, b: np.ndarray, noise: float, own: bool = False
           ) -> tuple[float, float]:
    """(log ratio of the medians of ``b`` over ``a``, its standard error); NaN without both.
    ``noise``: the run-to-run sd of each run's log median, added to the medians' own errors;
    ``own``: a point's measured spread between runs, which holds them (the error is sqrt(2)
    ``noise``, never under the medians' own)."""
    if len(a) == 0 or len(b) == 0:
        return math.nan, math.nan

    def se(x):  # the median's, from the robust sigma (MAD) of the log steps
        d = np.log(x) - np.median(np.log(x))
        return MEDIAN_SE * MAD_TO_SIGMA * float(np.median(np.abs(d))) / math.sqrt(len(x))

    steps = se(a) ** 2 + se(b) ** 2
    return (math.log(float(np.median(b)) / float(np.median(a))),
            math.sqrt(max(steps, 2 * noise ** 2) if own else steps + 2 * noise ** 2))


def log_ratio(x: float, y: float) -> float:
    return math.log(x / y) if x > 0 and y > 0 else math.nan


@dataclass
class Figures:
    """What a pair is judged by: the figure that decides (``decided``: ``WALL``, ``CPU`` or
    ``TRACED``), the log change of the step by it (``r``, ``se``) and of the CPU time per step
    (``k``, ``se_k``; NaN where it does not decide), the wall step's samples and the noise term
    used (``noise``: source, figure, s, runs)."""

    decided: str
    r: float
    se: float
    k: float
    se_k: float
    wa: np.ndarray
    wb: np.ndarray
    noise: dict


def measure(a: Run, b: Run, constant: float, spread: noise.Spread | None, traced: bool) -> Figures:
    """The figures of the pair. Two layouts (``traced``) are judged by the traced step, the
    step their line breaks down (``side_by_side``); else by the CPU time per step where both
    runs have it, the wall step where not. The noise term is the point's own spread of that
    figure (``harness.regress.noise``) where runs of the same code give one, else
    ``constant``."""
    wall = _walls(a) and _walls(b)  # else both sides' op sums: one measure for both
    wa, wb = (samples(x, schema.STEP_TIMES_S, wall) for x in (a, b))
    ca, cb = (samples(x, schema.STEP_CPU_TIMES_S) for x in (a, b))
    decided = TRACED if traced else CPU if len(ca) and len(cb) else WALL
    s = spread.of(decided == CPU) if spread is not None else math.nan
    own = math.isfinite(s)
    term = s if own else constant
    r, se = change(wa, wb, spread.wall if own else term, own)
    k, se_k = change(ca, cb, term, own) if decided == CPU else (math.nan, math.nan)
    if traced:
        ta, tb = (side_by_side.step_of(x, schema.STEP_S) for x in (a, b))
        _, se_t = change(*(samples(x, schema.TRACED_STEP_TIMES_S) for x in (a, b)), term, own)
        r, se = log_ratio(tb, ta), se_t if math.isfinite(se_t) else math.sqrt(2) * term
    said = (f"this point's own spread, s={s:.3g} ({decided}) from {spread.runs} runs of the "
            "same code" if own else f"the constant {constant:g} (fewer than "
            f"{noise.MIN_RUNS} runs of the same code)")
    return Figures(decided, r, se, k, se_k, wa, wb,
                    {"source": noise.OWN if own else noise.CONSTANT, "figure": decided,
                     "s": term, "runs": spread.runs if own else 0, "said": said})


def unstable(s: float, threshold: float, alpha: float) -> bool:
    """A spread that alone hides a change of ``threshold``: z(alpha) sqrt(2) s beyond it."""
    return math.isfinite(s) and norm.isf(alpha) * math.sqrt(2) * s > math.log1p(threshold)


def stats(f: Figures, p: float, spun: bool) -> str:
    """The figures behind a verdict: the wall step (or the traced step of two layouts), the
    CPU time per step, which figure decided and why, and the noise term used."""
    if not math.isfinite(f.r):
        return "no step times to compare"
    wall = (f"wall step {fmt_seconds(float(np.median(f.wa)))} -> "
            f"{fmt_seconds(float(np.median(f.wb)))}" if len(f.wa) and len(f.wb) else "")
    if f.decided == TRACED:
        return (f"{TRACED} {math.expm1(f.r):+.0%} (p={p:.2g}; decided by the {TRACED}, the "
                f"step the layouts' line breaks down){', ' + wall if wall else ''}; "
                f"noise: {f.noise['said']}")
    cpu = f", CPU time per step {math.expm1(f.k):+.0%}" if math.isfinite(f.k) else ""
    why = (f"; decided by the {WALL}: the CPU time per step grew while the wall step got "
           "faster (threads spinning while they wait)" if spun else "")
    return (f"{wall} ({math.expm1(f.r):+.0%}, p={p:.2g}){cpu}{why}; "
            f"noise: {f.noise['said']}")


def shaky(f: Figures, threshold: float) -> str:
    """Why a point is unstable: its own spread against the threshold."""
    return (f"unstable: runs of the same code spread {f.noise['s']:.3g} (SD of the log "
            f"{f.noise['figure']}), too wide to tell a change of {threshold:.0%}; repeat it "
            "(harness sweep --repeat) or quiet its host")
