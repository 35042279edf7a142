"""When a change counts: the thresholds every verdict is judged by (``harness.regress.judge``'s
module docstring gives the rule); ``--fail-on METRIC=PCT`` names one of ``METRICS``. Apart from
the judge so that the evidence it weighs (``harness.regress.evidence``) can name it without
importing the judge."""
from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError

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
