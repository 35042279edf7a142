"""Baseline vs candidate run: per-op and per-workload regression verdicts with a known
false-alarm rate.

Ops join on (program, op); times are each run's ``measured_s``; the tests run on the per-step
samples stored with the run (``steps.parquet``). The rule, per op:

1. ``new`` / ``gone``: in one run only (informational; the step total carries the cost).
2. ``unchanged``: ``|change| <= threshold`` (default 10%), significant or not.
3. ``noise`` (below min share): smaller than ``min_share`` of the step (default 1%) in both runs.
4. The tested ops are the rest of the ops in both runs with ``>= min_share`` of the step, chosen
   by size, not by their change (independent filtering, Bourgon et al. 2010). Each gets two
   p-values and keeps the larger (both must reject; an intersection-union test):
   - the two-sided Mann-Whitney U test of its per-step samples (within-run noise), the
     candidate's divided by the run's drift (exp of the tested ops' median log change), so
     that it asks what the next test asks: did the op move against the rest of the run?
   - its log change against the run-to-run noise (``noise.run_to_run``): back-to-back runs move
     every op a little, and a per-step test alone mistakes that for a change. The op's noise is
     its own within-run standard error plus a between-run term tau common to all tested ops,
     tau chosen so that their standardized changes spread (MAD) like N(0, 1); the p-value is
     Student's t with ``noise.NULL_DF`` degrees of freedom. Given several baseline runs
     (``harness.runs.history``), the op's noise is instead its own spread over them.
   Benjamini-Hochberg adjusts these over the tested ops (``q_value``); ``q <= alpha`` (default
   0.05) makes a ``regression`` / ``improvement``. Otherwise ``noise`` (not significant), or
   ``inconclusive`` when the data could not decide: too few steps for any op to reach
   ``alpha / tested`` (n vs m steps give at best p = 2 / C(n+m, n): 5 vs 5 give 0.008, 8 vs 8
   give 1.6e-4, 10 vs 10 give 1.1e-5), no per-step samples, or the op's noise above the
   threshold (it differs between runs by more than the threshold as a matter of course).

The step total (per step, the sum of the ops' times) gets the same rule with one test (its U
test) and is ``inconclusive`` when its noise (the standard error of the difference of the two
medians, ``noise.median_se``) exceeds the threshold, or when the tested ops all moved alike
(the step's change divided by the tested ops' median change is within the threshold): a host
that runs slower or faster looks exactly like that, and one pair of runs cannot tell them apart.

Step and ops agree, both ways. Op regressions make the step row a regression "carried by" them,
whatever its own total did (its note gives their added time and says when that is within the
step's noise): per-op tests see changes a noisy step total cannot. A step regression that no op
explains (no op regression, no new op; with at least ``noise.MIN_OPS_FOR_SPREAD`` ops tested) is
``inconclusive``: time spread thinly over many ops is what a busier host looks like.
``Verdicts.regressed`` (exit 1 of ``harness compare``) is any ``regression`` left.

The false-alarm rate: Benjamini-Hochberg keeps the expected share of false regressions among
flagged ops at ``alpha``; in A/A comparisons (nothing changed) every flag is false, so the
chance that a comparison flags any op is at most ``alpha`` (5%), and the run-to-run term (a
heavy-tailed null) and the threshold push it lower. ``benchmarks/bench_regress_sim.py`` measures
it by simulation from real CPU runs (false regressions per comparison, and the power to flag a 20%
slowdown of an op holding 5% of the step); docs/regression.md gives the figures.

Every tested op that is not a regression also gets ``detectable``: the smallest slowdown of it
alone that this comparison would have flagged (``harness.runs.detect``), so that a pass says what
it could not have seen. Explanations (``harness.runs.explain``) use the book's roofline terms.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness import schema
from harness.compare import workload_efficiency
from harness.runs import detect, noise, pair
from harness.runs.explain import explain
from harness.runs.history import History
from harness.runs.noise import min_p_value
from harness.runs.run import Run
from harness.runs.verdicts import (  # noqa: F401 (re-exported: the verdicts' vocabulary)
    ALL_PROGRAMS,
    GONE,
    IMPROVEMENT,
    INCONCLUSIVE,
    NEW,
    NOISE,
    REGRESSION,
    STEP_TOTAL,
    UNCHANGED,
    VERDICTS,
    Rule,
    Verdicts,
    agree,
)

log = logging.getLogger(__name__)

def decide(row: dict, rule: Rule, tested: int, sigma: float, p_null: float,
           noise_name: str) -> tuple[str, str]:
    """(verdict, note) for one row with both sides present, by the module's rule; ``sigma`` is
    the relative noise named ``noise_name``, ``p_null`` the row's p against it."""
    change, share = row[schema.CHANGE], max(row[schema.BASELINE_SHARE],
                                            row[schema.CANDIDATE_SHARE])
    n, m, p, q = (row[schema.BASELINE_STEPS], row[schema.CANDIDATE_STEPS], row[schema.P_VALUE],
                  row[schema.Q_VALUE])
    if not abs(change) > rule.threshold:  # NaN (0 -> 0) counts as unchanged
        return UNCHANGED, ""
    if share < rule.min_share:
        return NOISE, f"below min share ({share:.2%} of step)"
    if q <= rule.alpha:
        return (REGRESSION if change > 0 else IMPROVEMENT), ""
    if math.isnan(p):
        return INCONCLUSIVE, "no per-step samples to test"
    if min_p_value(n, m) > rule.alpha / max(tested, 1):
        return INCONCLUSIVE, (f"too few steps to decide ({n} vs {m}: p >= "
                              f"{min_p_value(n, m):.2g} among {tested} tested)")
    if sigma > rule.threshold:
        return INCONCLUSIVE, (f"too noisy to decide: {noise_name} {sigma:.0%} is above the "
                              f"{rule.threshold:.0%} threshold")
    if p_null > p:
        return NOISE, f"within {noise_name} ({sigma:.1%}; q={q:.2g})"
    return NOISE, f"not significant (q={q:.2g} > {rule.alpha:g})"


def _row(key, b: dict | None, c: dict | None, a: np.ndarray, z: np.ndarray) -> dict:
    """One row before its verdict and its tests (None when both sides are present); ``b``/``c``
    are the op's baseline/candidate rows (None if absent). Ops get their U test in
    ``_decide_ops``, once the run's drift is known; the step total in ``_workload_row``."""
    def get(side, col, default=np.nan):
        return float(side[col]) if side is not None else default

    src = c if c is not None else b
    tb, tc, sb, sc = get(b, "t"), get(c, "t"), get(b, "share", 0.0), get(c, "share", 0.0)
    change = np.nan  # undefined for new and gone ops
    if b is not None and c is not None:
        change = tc / tb - 1.0 if tb > 0 else (math.inf if tc > 0 else np.nan)
    return {schema.PROGRAM: key[0], schema.OP: key[1],
            **{col: src[col] for col in pair.DESCRIPTIVE},
            schema.BASELINE_S: tb, schema.CANDIDATE_S: tc, schema.DELTA_S: tc - tb,
            schema.CHANGE: change, schema.BASELINE_EFFICIENCY: get(b, "eff"),
            schema.CANDIDATE_EFFICIENCY: get(c, "eff"), schema.BASELINE_SHARE: sb,
            schema.CANDIDATE_SHARE: sc, schema.BASELINE_STEPS: len(a),
            schema.CANDIDATE_STEPS: len(z),
            schema.P_VALUE: np.nan, schema.Q_VALUE: np.nan, schema.DETECTABLE: np.nan,
            schema.NOTE: "", schema.EXPLANATION: "",
            schema.VERDICT: NEW if b is None else GONE if c is None else None}


def _log_se(a: np.ndarray, z: np.ndarray) -> float:
    """Standard error of log(median(z) / median(a)) from the per-step samples."""
    return noise.median_se(np.log(np.clip(a, 1e-12, None)), np.log(np.clip(z, 1e-12, None)))


def _decide_ops(ops: pd.DataFrame, rule: Rule, mesh: dict | None, samples: tuple[dict, dict],
                history: History | None = None):
    """Verdicts of the ops present in both runs: (table, run-to-run sigma, ops tested, the
    tested ops' median log change, NaN when too few to tell). With a ``history`` of baseline
    runs each op's run-to-run noise is its own spread over them (``harness.runs.history``)."""
    ops = ops.copy()
    both = ops[schema.VERDICT].isna()
    family = (both & (ops[[schema.BASELINE_SHARE, schema.CANDIDATE_SHARE]].max(axis=1)
                      >= rule.min_share) & (ops[schema.BASELINE_STEPS] > 0)
              & (ops[schema.CANDIDATE_STEPS] > 0)).to_numpy()
    r = np.log1p(ops.loc[family, schema.CHANGE].to_numpy(float))
    keys = list(zip(ops.loc[family, schema.PROGRAM], ops.loc[family, schema.OP]))
    se = [_log_se(samples[0][k], samples[1][k]) for k in keys]
    null = history.run_to_run(keys, r) if history else noise.run_to_run(r, se)
    sigma, p_null, total = null.sigma, null.p, null.noise
    shift = float(np.median(r)) if len(r) >= noise.MIN_OPS_FOR_SPREAD else math.nan
    # Each op's U test asks what the run-to-run term asks: did it move against the rest of the
    # run? Its candidate samples are taken back by the run's drift (the tested ops' median log
    # change) first, so a host that ran 20% faster throughout neither hides an op's slowdown
    # nor makes every op look changed.
    back = math.exp(-shift) if math.isfinite(shift) else 1.0
    ops.loc[family, schema.P_VALUE] = [noise.u_test(samples[0][k], samples[1][k] * back)
                                       for k in keys]
    nulls, noises = np.zeros(len(ops)), np.zeros(len(ops))
    nulls[family], noises[family] = p_null, np.nan_to_num(total)
    combined = np.maximum(ops.loc[family, schema.P_VALUE].to_numpy(float), p_null)
    # Weighted by each op's share of the baseline's step (known before the candidate is): the
    # false discovery rate stays at alpha, and more of it goes where a change costs the most.
    weights = np.maximum(ops.loc[family, schema.BASELINE_SHARE].to_numpy(float),
                         max(rule.min_share, 1e-9))
    ops.loc[family, schema.Q_VALUE] = noise.bh_adjust(combined, weights=weights)
    # What each op's test could have seen (harness.runs.detect) needs its run-to-run null for
    # any subset of the tested ops: with a history, its own spread moderated over the subset;
    # with one baseline, the subset's spread with the op's change at the top.
    def critical(tested, level, rows):
        if history:
            crit = history.run_to_run([k for k, t in zip(keys, tested) if t],
                                      r[tested]).critical(level)
            return crit if rows is None else crit[rows]
        return noise.critical_on_top(r[tested], np.asarray(se)[tested], level, rows)

    ops.loc[family, schema.DETECTABLE] = detect.per_op(
        ops.loc[family, schema.CHANGE].to_numpy(float),
        (ops.loc[family, schema.BASELINE_SHARE].to_numpy(float),
         ops.loc[family, schema.CANDIDATE_SHARE].to_numpy(float)), weights,
        [(samples[0][k], samples[1][k]) for k in keys], critical, rule.alpha, rule.threshold,
        rule.min_share)
    tested = int(family.sum())
    records = ops.to_dict("records")
    verdicts, notes, texts = (list(ops[c]) for c in (schema.VERDICT, schema.NOTE,
                                                      schema.EXPLANATION))
    for i in np.flatnonzero(both.to_numpy()):
        verdicts[i], notes[i] = decide(records[i], rule, tested, noises[i], nulls[i],
                                       "run-to-run noise")
        if verdicts[i] in (REGRESSION, IMPROVEMENT):
            texts[i] = explain(pd.Series(dict(records[i], **{schema.VERDICT: verdicts[i]})),
                               mesh)
    ops[schema.VERDICT], ops[schema.NOTE], ops[schema.EXPLANATION] = verdicts, notes, texts
    ops.loc[ops[schema.VERDICT] == REGRESSION, schema.DETECTABLE] = np.nan
    return ops, sigma, tested, shift


def _workload_row(b: pd.DataFrame, c: pd.DataFrame, a: np.ndarray, z: np.ndarray,
                  rule: Rule, shift: float, sigma: float) -> dict:
    """The whole step: median of per-step totals (sum of op medians without samples), one U
    test, ``inconclusive`` when its noise (s.e. of the medians' difference) is above the
    threshold."""
    def side(ops, samples):
        t = float(np.median(samples)) if len(samples) else float(ops["t"].sum())
        eff = workload_efficiency(ops, predicted="pred", measured="t")
        return pd.Series({"t": t, "share": 1.0, "eff": eff,
                          **dict.fromkeys(pair.DESCRIPTIVE), schema.CATEGORY: "all ops"})
    bs, cs = side(b, a), side(c, z)
    row = _row((ALL_PROGRAMS, STEP_TOTAL), bs, cs, a, z)
    row[schema.P_VALUE] = noise.u_test(a, z)
    # Run-to-run noise of a sum of ops moving independently by sigma each: sigma x the root of
    # the summed squared shares (few big ops: the step moves nearly as much as they do).
    rest = (1 + row[schema.CHANGE]) / math.exp(shift) - 1 if math.isfinite(shift) else math.nan
    p_null = float(noise.null_p(math.log1p(rest), sigma * math.sqrt((b["share"] ** 2).sum()))) \
        if math.isfinite(rest) and sigma > 0 else 0.0
    row[schema.Q_VALUE] = max(row[schema.P_VALUE], p_null)  # one test: nothing to adjust
    rel_noise = noise.median_se(a, z) / bs["t"] if bs["t"] > 0 else math.nan
    verdict, note = decide(row, rule, 1, rel_noise if math.isfinite(rel_noise) else 0.0, p_null,
                           "step noise")
    if verdict != UNCHANGED and row[schema.P_VALUE] <= rule.alpha and abs(rest) <= rule.threshold:
        verdict, note = INCONCLUSIVE, (
            f"every op moved alike (median op {math.expm1(shift):+.0%}, the rest {rest:+.0%}), "
            "as when the host runs slower or faster: rerun to tell")
    row.update({schema.VERDICT: verdict, schema.NOTE: note})
    if verdict in (REGRESSION, IMPROVEMENT):
        row[schema.EXPLANATION] = explain(pd.Series(row))
    return row


def _order(df: pd.DataFrame) -> pd.DataFrame:
    rank = {v: i for i, v in enumerate(VERDICTS)}
    key = df[schema.DELTA_S].abs().fillna(df[schema.BASELINE_S].fillna(0)
                                          + df[schema.CANDIDATE_S].fillna(0))
    return (df.assign(_r=df[schema.VERDICT].map(rank), _k=-key)
            .sort_values(["_r", "_k"], kind="stable").drop(columns=["_r", "_k"])
            .reset_index(drop=True))


def compare_runs(baseline: Run | Sequence[Run], candidate: Run, *,
                 threshold: float = 0.10, alpha: float = 0.05,
                 min_share: float = 0.01) -> Verdicts:
    """Per-op and per-workload verdicts of ``candidate`` against ``baseline``: one run, or
    several runs of the same code, oldest first (``harness.runs.history``)."""
    rule = Rule(threshold, alpha, min_share)
    history = None
    if not isinstance(baseline, Run):
        runs = list(baseline)
        if len(runs) == 1:
            baseline = runs[0]
        else:
            history = History.of(runs, min_share)
            baseline = history.pooled()
    b, c = pair.prepare(baseline, "baseline"), pair.prepare(candidate, "candidate")
    sb, sc = pair.samples(baseline, "baseline"), pair.samples(candidate, "candidate")
    warnings = list(dict.fromkeys(w for run in (history.runs if history else [baseline])
                                  for w in pair.meta_warnings(run, candidate)))
    for which, run, s in (("baseline", baseline, sb), ("candidate", candidate, sc)):
        if not s:
            warnings.append(f"{which} run {run.path.name} has no per-step samples; "
                            "no op can be tested (verdicts are inconclusive)")
    bi, ci = (x.set_index(pair.KEYS).to_dict("index") for x in (b, c))
    keys = list(dict.fromkeys(list(ci) + list(bi)))
    mesh = candidate.meta.get("mesh") if isinstance(candidate.meta.get("mesh"), dict) else None
    empty = np.array([])
    rows = [_row(k, bi.get(k), ci.get(k), sb.get(k, empty), sc.get(k, empty))
            for k in keys]
    ops = pd.DataFrame(rows, columns=list(schema.REGRESS)) if rows else schema.empty(
        schema.REGRESS)
    ops, sigma, tested, shift = _decide_ops(ops, rule, mesh, (sb, sc), history)
    totals = pair.step_totals(baseline, b), pair.step_totals(candidate, c)
    step = _workload_row(b, c, *totals, rule, shift, sigma)
    step = agree(ops, step, *totals, tested)
    v = Verdicts(baseline=history.label if history else baseline.run_id,
                 candidate=candidate.run_id, ops=_order(ops),
                 workload=pd.DataFrame([step], columns=list(schema.REGRESS)), rule=rule,
                 warnings=warnings, run_to_run=sigma, tested=tested,
                 baselines=len(history.runs) if history else 1)
    log.info("compare %s -> %s: %s", v.baseline, v.candidate, v.headline())
    return v
