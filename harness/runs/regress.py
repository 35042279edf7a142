"""Baseline vs candidate run: noise-aware per-op and per-workload regression verdicts.

Ops join on (program, op); times are each run's ``measured_s``; the noise test runs on the
per-step samples stored with the run (``steps.parquet``). Per op, and for the step total (sum of
op times per step), the verdict is:

- ``new`` / ``gone``: in one run only (informational; the step total carries the cost);
- ``unchanged``: ``|change| <= threshold``, significant or not;
- ``regression`` / ``improvement``: beyond the threshold, material (>= ``min_share`` of the step
  in either run), and the Mann-Whitney U test rejects equality (``p <= alpha``) -- or the
  samples are too few for any result to reach ``alpha`` and ``|change| > untested_threshold``
  (default 50%, more than noise on a quiet machine makes; the note says the test was skipped);
- ``noise``: beyond the threshold but none of the above.

"Too few" is exact: with n vs m samples the smallest two-sided p the test can return is
2 / C(n+m, n); 3 vs 3 steps give 0.1, so nothing could reject at 0.05; 4 vs 4 give 0.029.

Two-sided rather than one-sided 'less': the verdict is symmetric, its direction read from the
medians. Two one-sided tests at ``alpha`` would give a false verdict of some kind with
probability 2*alpha; one two-sided test keeps it at ``alpha`` and costs little power (5 steps a
side, cleanly separated: p = 2/252 = 0.008). Ops are tested without a multiple-testing
correction; the threshold and ``min_share`` bound what a false positive can cost.

Explanations (``harness.runs.explain``) use the book's roofline terms.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from harness import schema
from harness.compare import workload_efficiency
from harness.errors import HarnessError
from harness.runs.explain import explain
from harness.runs.store import StoredRun

log = logging.getLogger(__name__)

REGRESSION, IMPROVEMENT, NEW, GONE, NOISE, UNCHANGED = (
    "regression", "improvement", "new", "gone", "noise", "unchanged")
VERDICTS = (REGRESSION, IMPROVEMENT, NEW, GONE, NOISE, UNCHANGED)  # also the display order
STEP_TOTAL = "step total"  # the per-workload row's op name
ALL_PROGRAMS = "(all)"     # ... and its program
# Meta fields that make two runs different experiments; a difference is warned about.
META_KEYS = (schema.WORKLOAD, schema.PRESET, schema.OVERRIDES, schema.MESH, schema.DEVICE_KIND,
             schema.DEVICE_COUNT, schema.CHIP)
_KEYS = [schema.PROGRAM, schema.OP]
_NEEDED = (schema.PROGRAM, schema.OP, schema.MEASURED_S)
_STEP_COLUMNS = (schema.PROGRAM, schema.OP, schema.STEP, schema.MEASURED_S)
_DESCRIPTIVE = (schema.CATEGORY, schema.BOUND, schema.COLLECTIVE, schema.GROUP_SIZE)


@dataclass(frozen=True)
class Rule:
    """The verdict rule's knobs (see the module docstring)."""

    threshold: float = 0.10           # relative change that matters (0.10 = 10%)
    alpha: float = 0.05               # significance level of the Mann-Whitney U test
    min_share: float = 0.01           # ops below this share of the step in both runs never flag
    untested_threshold: float = 0.50  # |change| that flags even when samples are too few

    def __post_init__(self):
        for name, ok, valid in (
                ("threshold", 0 <= self.threshold < math.inf, ">= 0 (0.10 = 10%)"),
                ("alpha", 0 < self.alpha < 1, "in (0, 1)"),
                ("min_share", 0 <= self.min_share < 1, "in [0, 1) (0.01 = 1% of the step)"),
                ("untested_threshold", 0 <= self.untested_threshold < math.inf, ">= 0")):
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

    def headline(self) -> str:
        """One line: the overall verdict, what regressed, and the rule used."""
        r, c = self.rule, self.counts()
        rule = f"threshold {r.threshold:.0%}, alpha {r.alpha:g}, min share {r.min_share:.0%}"
        w = self.workload.iloc[0]
        change = "n/a" if math.isnan(w[schema.CHANGE]) else f"{w[schema.CHANGE]:+.0%}"
        step = f"step total {change} ({w[schema.VERDICT]})"
        if self.regressed:
            names = ", ".join(self.ops.loc[self.ops[schema.VERDICT] == REGRESSION, schema.OP])
            return (f"REGRESSION: {names or STEP_TOTAL}; {c[REGRESSION]} of {len(self.ops)} ops "
                    f"regressed; {step}; {rule}")
        return (f"OK: no regression ({c[IMPROVEMENT]} improved, {c[NOISE]} within noise, "
                f"{c[UNCHANGED]} unchanged, {c[NEW]} new, {c[GONE]} gone); {step}; {rule}")


def min_p_value(n: int, m: int) -> float:
    """Smallest two-sided p the exact Mann-Whitney U test can return for n vs m samples."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def u_test(a: np.ndarray, b: np.ndarray, alpha: float) -> float:
    """Two-sided Mann-Whitney U p-value of ``a`` vs ``b``; NaN when too few samples to reject."""
    if min_p_value(len(a), len(b)) > alpha:
        return float("nan")
    if np.ptp(np.concatenate([a, b])) == 0.0:  # all equal: nothing to rank
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def decide(change: float, p: float, material: bool, rule: Rule, n: int, m: int,
           share: float) -> tuple[str, str]:
    """(verdict, note) for one row by the module's rule."""
    if not abs(change) > rule.threshold:  # NaN (0 -> 0) counts as unchanged
        return UNCHANGED, ""
    direction = REGRESSION if change > 0 else IMPROVEMENT
    if not material:
        return NOISE, f"below min share ({share:.2%} of step)"
    if math.isnan(p):
        why = f"too few steps to test ({n} vs {m})"
        if abs(change) > rule.untested_threshold:
            return direction, f"{why}; change beyond {rule.untested_threshold:.0%}"
        return NOISE, why
    if p <= rule.alpha:
        return direction, ""
    return NOISE, f"not significant (p={p:.2g} > {rule.alpha:g})"


def _samples(run: StoredRun, which: str) -> dict[tuple[str, str], np.ndarray]:
    """(program, op) -> per-step times; {} when the run has no per-step table."""
    steps = run.steps
    if steps is None or steps.empty:
        return {}
    schema.validate(steps, _STEP_COLUMNS, where=f"{which} run {run.path} steps")
    steps = steps.dropna(subset=[schema.MEASURED_S])
    return {(str(k[0]), str(k[1])): g[schema.MEASURED_S].to_numpy(float)
            for k, g in steps.groupby(_KEYS, sort=False)}


def _step_totals(run: StoredRun, ops: pd.DataFrame) -> np.ndarray:
    """Per step, the summed time of the ops in the run's ops table (other programs left out)."""
    if run.steps is None or run.steps.empty:
        return np.array([])
    steps = run.steps.astype({schema.PROGRAM: str, schema.OP: str})
    steps = steps.merge(ops[_KEYS], on=_KEYS, how="inner")
    return steps.groupby(schema.STEP)[schema.MEASURED_S].sum().to_numpy(float)


def _prepare(run: StoredRun, which: str) -> pd.DataFrame:
    ops = schema.validate(run.ops, _NEEDED, where=f"{which} run {run.path} ops")
    dup = ops.duplicated(_KEYS)
    if dup.any():
        first = ops.loc[dup, _KEYS].iloc[0].tolist()
        raise HarnessError(f"{which} run {run.path}: ops table repeats (program, op) {first}")
    ops = ops.assign(**{schema.PROGRAM: ops[schema.PROGRAM].astype(str),
                        schema.OP: ops[schema.OP].astype(str)})
    m = ops[schema.MEASURED_S].astype(float)
    total = m.sum()
    out = pd.DataFrame({schema.PROGRAM: ops[schema.PROGRAM], schema.OP: ops[schema.OP],
                        "t": m, "share": m / total if total > 0 else np.nan,
                        "eff": ops.get(schema.EFFICIENCY, pd.Series(np.nan, index=ops.index)),
                        "pred": ops.get(schema.PREDICTED_S, pd.Series(np.nan, index=ops.index))})
    for col in _DESCRIPTIVE:
        out[col] = ops[col] if col in ops.columns else None
    return out


def _row(key, b: pd.Series | None, c: pd.Series | None, a: np.ndarray, z: np.ndarray,
         rule: Rule, mesh: dict | None = None) -> dict:
    """One verdict row; ``b``/``c`` are the op's baseline/candidate rows (None if absent)."""
    def get(side, col, default=np.nan):
        return float(side[col]) if side is not None else default

    src = c if c is not None else b
    tb, tc, sb, sc = get(b, "t"), get(c, "t"), get(b, "share", 0.0), get(c, "share", 0.0)
    change = np.nan  # undefined for new and gone ops
    if b is not None and c is not None:
        change = tc / tb - 1.0 if tb > 0 else (math.inf if tc > 0 else np.nan)
    row = {schema.PROGRAM: key[0], schema.OP: key[1],
           **{col: src[col] for col in _DESCRIPTIVE},
           schema.BASELINE_S: tb, schema.CANDIDATE_S: tc, schema.DELTA_S: tc - tb,
           schema.CHANGE: change, schema.BASELINE_EFFICIENCY: get(b, "eff"),
           schema.CANDIDATE_EFFICIENCY: get(c, "eff"), schema.BASELINE_SHARE: sb,
           schema.CANDIDATE_SHARE: sc, schema.BASELINE_STEPS: len(a),
           schema.CANDIDATE_STEPS: len(z), schema.P_VALUE: np.nan, schema.NOTE: "",
           schema.EXPLANATION: "", schema.VERDICT: NEW if b is None else GONE}
    if b is None or c is None:
        return row
    p = u_test(a, z, rule.alpha)
    verdict, note = decide(change, p, max(sb, sc) >= rule.min_share, rule, len(a), len(z),
                           max(sb, sc))
    row.update({schema.P_VALUE: p, schema.VERDICT: verdict, schema.NOTE: note})
    if verdict in (REGRESSION, IMPROVEMENT):
        row[schema.EXPLANATION] = explain(pd.Series(row), mesh)
    return row


def _workload_row(b: pd.DataFrame, c: pd.DataFrame, a: np.ndarray, z: np.ndarray,
                  rule: Rule) -> dict:
    """The whole step: median of per-step totals (sum of op medians without samples)."""
    def side(ops, samples):
        t = float(np.median(samples)) if len(samples) else float(ops["t"].sum())
        eff = workload_efficiency(ops, predicted="pred", measured="t")
        return pd.Series({"t": t, "share": 1.0, "eff": eff,
                          **dict.fromkeys(_DESCRIPTIVE), schema.CATEGORY: "all ops"})
    return _row((ALL_PROGRAMS, STEP_TOTAL), side(b, a), side(c, z), a, z, rule)


def meta_warnings(baseline: StoredRun, candidate: StoredRun) -> list[str]:
    """One line per meta field (``META_KEYS``) on which the two runs differ."""
    out = []
    for key in META_KEYS:
        vb, vc = baseline.meta.get(key), candidate.meta.get(key)
        if (vb is not None or vc is not None) and vb != vc:
            out.append(f"runs differ in {key}: baseline {vb!r}, candidate {vc!r}; "
                       "comparing anyway")
    return out


def _order(df: pd.DataFrame) -> pd.DataFrame:
    rank = {v: i for i, v in enumerate(VERDICTS)}
    key = df[schema.DELTA_S].abs().fillna(df[schema.BASELINE_S].fillna(0)
                                          + df[schema.CANDIDATE_S].fillna(0))
    return (df.assign(_r=df[schema.VERDICT].map(rank), _k=-key)
            .sort_values(["_r", "_k"], kind="stable").drop(columns=["_r", "_k"])
            .reset_index(drop=True))


def compare_runs(baseline: StoredRun, candidate: StoredRun, *, threshold: float = 0.10,
                 alpha: float = 0.05, min_share: float = 0.01,
                 untested_threshold: float = 0.50) -> Verdicts:
    """Per-op and per-workload verdicts of ``candidate`` against ``baseline``."""
    rule = Rule(threshold, alpha, min_share, untested_threshold)
    b, c = _prepare(baseline, "baseline"), _prepare(candidate, "candidate")
    sb, sc = _samples(baseline, "baseline"), _samples(candidate, "candidate")
    warnings = meta_warnings(baseline, candidate)
    for which, run, s in (("baseline", baseline, sb), ("candidate", candidate, sc)):
        if not s:
            warnings.append(f"{which} run {run.path.name} has no per-step samples; "
                            f"only changes beyond {rule.untested_threshold:.0%} can flag")
    bi, ci = b.set_index(_KEYS), c.set_index(_KEYS)
    keys = list(dict.fromkeys(list(ci.index) + list(bi.index)))
    mesh = candidate.meta.get("mesh") if isinstance(candidate.meta.get("mesh"), dict) else None
    empty = np.array([])
    rows = [_row(k, bi.loc[k] if k in bi.index else None, ci.loc[k] if k in ci.index else None,
                 sb.get(k, empty), sc.get(k, empty), rule, mesh) for k in keys]
    ops = pd.DataFrame(rows, columns=list(schema.REGRESS)) if rows else schema.empty(
        schema.REGRESS)
    totals = _step_totals(baseline, b), _step_totals(candidate, c)
    workload = pd.DataFrame([_workload_row(b, c, *totals, rule)], columns=list(schema.REGRESS))
    v = Verdicts(baseline=baseline.run_id, candidate=candidate.run_id, ops=_order(ops),
                 workload=workload, rule=rule, warnings=warnings)
    log.info("compare %s -> %s: %s", v.baseline, v.candidate, v.headline())
    return v
