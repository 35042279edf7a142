"""What a baseline-vs-candidate comparison says (``harness.runs.regress`` decides it): the
verdicts, the rule's knobs, and the verdict table with its one-line headline."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.runs import noise

REGRESSION, IMPROVEMENT, INCONCLUSIVE, NEW, GONE, NOISE, UNCHANGED = (
    "regression", "improvement", "inconclusive", "new", "gone", "noise", "unchanged")
VERDICTS = (REGRESSION, IMPROVEMENT, INCONCLUSIVE, NEW, GONE, NOISE, UNCHANGED)  # display order
STEP_TOTAL = "step total"  # the per-workload row's op name
ALL_PROGRAMS = "(all)"     # ... and its program


@dataclass(frozen=True)
class Rule:
    """The verdict rule's knobs (see the module docstring)."""

    threshold: float = 0.10  # relative change that matters (0.10 = 10%)
    alpha: float = 0.05      # false discovery rate over the tested ops (Benjamini-Hochberg)
    min_share: float = 0.01  # ops below this share of the step in both runs are not tested

    def __post_init__(self):
        for name, ok, valid in (
                ("threshold", 0 <= self.threshold < math.inf, ">= 0 (0.10 = 10%)"),
                ("alpha", 0 < self.alpha < 1, "in (0, 1)"),
                ("min_share", 0 <= self.min_share < 1, "in [0, 1) (0.01 = 1% of the step)")):
            if not ok:
                raise HarnessError(f"{name} must be {valid}, got {getattr(self, name)}")


@dataclass
class Verdicts:
    """Per-op rows (``schema.REGRESS`` columns, regressions first) and the per-workload row."""

    baseline: str
    candidate: str
    ops: pd.DataFrame
    workload: pd.DataFrame
    rule: Rule
    warnings: list[str] = field(default_factory=list)
    run_to_run: float = math.nan  # sigma of the tested ops' log changes
    tested: int = 0               # ops in the Benjamini-Hochberg family
    baselines: int = 1            # baseline runs (more than one: each op's own spread)

    def table(self) -> pd.DataFrame:
        """The workload row, then every op row."""
        return pd.concat([self.workload, self.ops], ignore_index=True)

    @property
    def regressions(self) -> pd.DataFrame:
        t = self.table()
        return t[t[schema.VERDICT] == REGRESSION].reset_index(drop=True)

    @property
    def regressed(self) -> bool:
        return bool((self.table()[schema.VERDICT] == REGRESSION).any())

    def counts(self) -> dict[str, int]:
        vc = self.ops[schema.VERDICT].value_counts()
        return {v: int(vc.get(v, 0)) for v in VERDICTS}

    def could_see(self, largest: int = 3) -> str:
        """One line: the smallest slowdown of one op alone this comparison flags
        (``harness.runs.detect``), for the ``largest`` tested ops by baseline share and the
        median tested op; empty when no op was tested."""
        o = self.ops[self.ops[schema.DETECTABLE].notna()]
        if o.empty:
            return ""

        def slowdown(x: float) -> str:
            return "never (too few steps)" if math.isinf(x) else f"from +{x:.0%}"

        big = o.sort_values(schema.BASELINE_SHARE, ascending=False, kind="stable").head(largest)
        each = ", ".join(f"{r[schema.OP]} ({r[schema.BASELINE_SHARE]:.0%} of the step) "
                         f"{slowdown(r[schema.DETECTABLE])}" for _, r in big.iterrows())
        median = float(o[schema.DETECTABLE].median())
        return (f"could flag one op slowed alone: {each}; the median of {len(o)} ops "
                f"{slowdown(median)}")

    def headline(self) -> str:
        """One line: the overall verdict, what regressed, and the rule used."""
        r, c = self.rule, self.counts()
        sigma = "n/a" if not math.isfinite(self.run_to_run) else f"{self.run_to_run:.1%}"
        if self.baselines > 1:
            sigma += f" (median op, over {self.baselines} baseline runs)"
        rule = (f"threshold {r.threshold:.0%}, FDR {r.alpha:g} over {self.tested} tested ops, "
                f"min share {r.min_share:.0%}, between-run noise {sigma}")
        w = self.workload.iloc[0]
        change = "n/a" if math.isnan(w[schema.CHANGE]) else f"{w[schema.CHANGE]:+.0%}"
        step = f"step total {change} ({w[schema.VERDICT]})"
        if self.regressed:
            names = ", ".join(self.ops.loc[self.ops[schema.VERDICT] == REGRESSION, schema.OP])
            return (f"REGRESSION: {names or STEP_TOTAL}; {c[REGRESSION]} of {len(self.ops)} ops "
                    f"regressed; {step}; {rule}")
        word = "INCONCLUSIVE" if w[schema.VERDICT] == INCONCLUSIVE or c[INCONCLUSIVE] else "OK"
        return (f"{word}: no regression ({c[IMPROVEMENT]} improved, {c[INCONCLUSIVE]} "
                f"inconclusive, {c[NOISE]} within noise, {c[UNCHANGED]} unchanged, {c[NEW]} new, "
                f"{c[GONE]} gone); {step}; {rule}")


def agree(ops: pd.DataFrame, step: dict, a: np.ndarray, z: np.ndarray, tested: int) -> dict:
    """The step's row, made to say what its ops say (``harness.runs.regress``'s docstring): op
    regressions make it a regression carried by them, whatever its own total did; a step
    regression that no op explains (no op regression, no new op) becomes ``inconclusive`` when
    enough ops were tested to tell."""
    regs = ops[schema.VERDICT] == REGRESSION
    if regs.any() and step[schema.VERDICT] != REGRESSION:
        added, base = float(ops.loc[regs, schema.DELTA_S].sum()), step[schema.BASELINE_S]
        note = (f"carried by {int(regs.sum())} op regression(s) adding {added * 1e3:.3g} ms per "
                f"step ({added / base:+.1%} of the step); the step total alone moved "
                f"{step[schema.CHANGE]:+.1%}")
        step_noise_s = noise.median_se(a, z)
        if abs(step[schema.CHANGE] * base) < step_noise_s:  # False for NaN (no samples)
            note += f", within its noise ({step_noise_s * 1e3:.3g} ms)"
        return dict(step, **{schema.VERDICT: REGRESSION, schema.EXPLANATION: "",
                             schema.NOTE: note})
    explained = ops[schema.VERDICT].isin([REGRESSION, NEW]).any()
    if step[schema.VERDICT] != REGRESSION or explained or tested < noise.MIN_OPS_FOR_SPREAD:
        return step
    return dict(step, **{schema.VERDICT: INCONCLUSIVE, schema.EXPLANATION: "",
                         schema.NOTE: "slower, but no op is on its own: the time is spread over "
                                      "many ops, as when the host is busier; rerun to tell"})
