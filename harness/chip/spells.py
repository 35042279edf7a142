"""A host whose cores change speed while it is calibrated: the matmul probes that ran in a slower
spell measured again (``repeat``), and the spread the calibration's figures carry (``spread_of``).

The evidence (docs/accuracy.md, "a host whose cores change speed"): with nothing else running,
the 2-core development host runs the reference matmul at 70-90 GFLOP per CPU second, with spells
of 1-2 s (or whole processes) at 40-50; a calibration lasts 40 s or more, so a spell falls on
some probes and not others (the 256x256 ``ynn_fusion`` probe read 0.48-1.04 ms across
calibrations, the 512x512 one 5.6-13.1 ms). The cores' speed (``drift.core_speed``) is checked
before each fp32 matmul probe and once after them; a probe beside a check slower than the
fastest by more than ``drift.CORE_SPREAD`` ran in a slow spell and is measured again, within
``REPEAT_S``. A roof is a lower bound on time (roofline.md), so each probe keeps its fastest
repeat (``harness.chip.rates`` takes the best rate of a kernel and size): the cores' fast mode
is what the host can do. What the repeats cannot take out, the fastest check over the slowest,
is stored as the calibration's ``spread``: a figure priced from it that lands above the roofline
by less than that is within the host's spread, not beyond the roof
(``harness.analysis.gaps.within_spread``).

Imports nothing heavy: the report reads ``spread_of`` from a run's meta.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.chip.drift import CORE_SPREAD

log = logging.getLogger(__name__)

# The repeats' time, in all (wall seconds): a full calibration took 41-45 s on the quiet
# development host and 58-67 s at load 3-8 (docs/chips.md), so repeats keep it near a minute.
# At load 8-14 its chained probes up to 256x256 took 1.3-3 s each, 512x512 3-15 s, and
# 1024x1024 25-75 s: the small probes, which a 1-2 s spell covers whole, are the ones repeated.
REPEAT_S = 15.0
ROUNDS = 2  # a probe still in a slow spell after this many repeats keeps what it has


@dataclass
class Ran:
    """One matmul probe measured: its task (``harness.chip.modes.tasks``), sample and wall
    seconds, and where it stands among the checks of the cores' speed (``Spells.checks``)."""

    task: tuple
    sample: object  # probes.Sample
    seconds: float
    after: int  # how many checks came before it


@dataclass
class Spells:
    """The cores' speed, checked beside the matmul probes, and the probes measured between the
    checks, in order. ``check`` measures the speed now (``drift.core_speed``)."""

    check_speed: Callable[[], float]
    checks: list[float] = field(default_factory=list)
    ran: list[Ran] = field(default_factory=list)

    def check(self) -> float:
        self.checks.append(self.check_speed())
        return self.checks[-1]

    def add(self, task: tuple, sample, seconds: float) -> None:
        self.ran.append(Ran(task, sample, seconds, len(self.checks)))

    def beside(self, r: Ran) -> float:
        """The slower of the checks just before and just after probe ``r`` (NaN: none)."""
        near = self.checks[max(r.after - 1, 0):r.after + 1]
        return min(near) if near else math.nan

    @property
    def spread(self) -> float:
        """Fastest over slowest check (NaN: no check)."""
        return max(self.checks) / min(self.checks) if self.checks else math.nan

    def slow(self) -> list[Ran]:
        """The probes none of whose runs was beside checks within ``CORE_SPREAD`` of the
        fastest, each once (its first run), cheapest first."""
        if not self.checks:
            return []
        floor = max(self.checks) / CORE_SPREAD
        fast = {r.task for r in self.ran if self.beside(r) >= floor}
        first = {r.task: r for r in reversed(self.ran)}
        return sorted((r for t, r in first.items() if t not in fast), key=lambda r: r.seconds)


def repeat(spells: Spells, run: Callable[[tuple], object], budget_s: float = REPEAT_S,
           rounds: int = ROUNDS, clock: Callable[[], float] = time.perf_counter) -> list:
    """The slow-spell probes (``Spells.slow``) measured again by ``run(task)``, a check before
    each and one after each round, for up to ``rounds`` rounds; a probe whose first run took
    longer than the budget has left is not started. Returns the new samples (the caller keeps
    the best of each probe's)."""
    out, t0 = [], clock()
    for _ in range(rounds):
        todo = spells.slow()
        started = False
        for r in todo:
            if clock() - t0 + r.seconds > budget_s:
                continue
            spells.check()
            t = clock()
            sample = run(r.task)
            if sample is not None:
                spells.add(r.task, sample, clock() - t)
                out.append(sample)
            started = True
        if not started:
            break
        spells.check()
    log.info("calibrate: %d probe run(s) repeated for the faster spell in %.1f s", len(out),
             clock() - t0)
    left = spells.slow()
    if left:
        log.info("calibrate: %d probe(s) still beside a slow spell after the repeats: %s",
                 len(left), ", ".join(" ".join(map(str, r.task[:4])) for r in left))
    return out


def spread_of(calibration: dict | None) -> float:
    """The spread a calibration record (a run's meta ``calibration``) stores: its ``spread``,
    else its ``core_speed`` range's (records made before the field); NaN when it has neither
    (older records, data-sheet chips)."""
    cal = calibration or {}
    if cal.get("spread"):
        return float(cal["spread"])
    speeds = cal.get("core_speed") or ()
    return speeds[1] / speeds[0] if len(speeds) == 2 and speeds[0] > 0 else math.nan
