"""A point's history judged: its change points, each with its commit range and cause, and the
newest night against the last stable segment.

Change points are placed first where the code changed, by the verdict's own test on the nights
either side (``harness.regress.code_changes``), then by E-divisive means
(``harness.regress.changepoints``) within the segments those leave, each night weighed by its
uncertainty (``history.Series.weights``). Each says the
commits that lie between the last night before it and the first after it (``A..B``: git's
range, the commits reachable from B and not from A) and its cause, from the newest run of each
of those two nights: the **program** changed (``changes.program``: its HLO fingerprints, FLOPs,
bytes or collectives), the **same program** got slower (the commits changed something the
compiled program does not show: the runtime, a library, the input), or the **host**: both
nights ran the same code (``noise.code``), so what moved was the machine.

The newest night (pooled with its repeats and confirmations) is judged against the last segment
of the nights before it, which no change point cuts, up to the last night of another code than
the newest's (``_reference``: the nights that ran its code are the change, kept out of the
segment's spread, and its cause and commit range are read where the code changed): the change
is the log of the newest night's value over the segment's median, its error the segment's own
spread ``s`` (the SD of its nights' values, the point's own noise, weighed by Student's t with
its nights less one degrees of freedom; the constant ``Rule.noise`` under
``history.MIN_NIGHTS`` nights) over the newest night's runs, plus the median's
(``figures.MEDIAN_SE`` s / root n). The
verdicts are ``harness compare``'s, by its rule (``figures.worse``, ``figures.unstable``):
``regression`` beyond the ``--fail-on`` threshold and significant at ``alpha`` (cause program or
same program), ``inconclusive`` where the probe's cores ran as much slower (cause host),
``unstable`` where ``s`` alone hides a change of the threshold, ``improvement``, ``ok``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import schema
from harness.regress import (
    changepoints,
    changes,
    code_changes,
    evidence,
    figures,
    history,
    judge,
    noise,
)
from harness.regress.history import Night, Series

HOST = judge.HOST  # a change whose two nights ran the same code


@dataclass
class Change:
    """A change point: the first night of the new segment (``index``), the change of the
    segment medians, the commit range and the cause."""

    index: int
    p_value: float
    change: float
    before: Night
    after: Night
    cause: str
    what: str

    @property
    def commits(self) -> str:
        a, b = self.before.commit[:12] or "?", self.after.commit[:12] or "?"
        return f"{a}..{b}" if a != b else f"{a} (no commit between)"

    def to_dict(self) -> dict:
        return {schema.NIGHT: self.after.name, "index": self.index,
                schema.P_VALUE: self.p_value, schema.CHANGE: self.change,
                schema.COMMITS: self.commits, "from_commit": self.before.commit,
                "to_commit": self.after.commit, "from_night": self.before.name,
                schema.CAUSE: self.cause, "what": self.what}


@dataclass
class Trend:
    """A point's series, its change points and the newest night's verdict."""

    series: Series
    changes: list[Change] = field(default_factory=list)
    stable: tuple[int, int] = (0, 0)  # the last stable segment, [start, end) nights
    verdict: str = judge.OK
    cause: str = judge.NOISE
    message: str = ""
    change: float = math.nan   # the newest night's value over the segment's median, - 1
    p_value: float = math.nan
    s: float = math.nan        # the segment's own spread (NaN: the constant was used)


def cause_of(a: Night, b: Night, change: float) -> tuple[str, str]:
    """(cause, one line) of a change from night ``a`` to night ``b`` (the module docstring)."""
    x, y = a.newest, b.newest
    prog = changes.program(x, y)
    if prog["changed"]:
        return judge.PROGRAM, f"the program changed: {prog['what']}"
    if noise.code(x) == noise.code(y):
        return HOST, "the same code on both nights: the host changed"
    return judge.SAME_PROGRAM, ("the same program " + ("slower" if change > 0 else "faster")
                                + " (the commits changed what the compiled program does not show)")


def _median(values: np.ndarray) -> float:
    v = values[np.isfinite(values)]
    return float(np.median(v)) if len(v) else math.nan


def _threshold(rule: judge.Rule) -> float:
    """The step's ``--fail-on`` threshold (else the smallest)."""
    fail_on = dict(rule.fail_on)
    return fail_on.get("step", min(fail_on.values()))


def places(s: Series, upto: int, significance: float = changepoints.ALPHA,
           rule: judge.Rule = judge.Rule()) -> list[changepoints.ChangePoint]:
    """Where ``s``'s first ``upto`` nights change: at the changes of code that the verdict's own
    test finds (``code_changes``), then by E-divisive within each segment they leave (the
    machine, or a change of code too small for its nights)."""
    x, nights = s.values[:upto], s.nights[:upto]
    found = code_changes.at_code_changes(x, [noise.code(n.newest) for n in nights],
                                         [n.error for n in nights], _threshold(rule),
                                         significance)
    cuts = changepoints.segments(len(x), found)
    for lo, hi in cuts:
        found += [changepoints.ChangePoint(c.index + lo, c.p_value) for c in
                  changepoints.e_divisive(x[lo:hi], s.weights[lo:hi], significance)]
    return sorted(found, key=lambda c: c.index)


def change_points(s: Series, upto: int, significance: float = changepoints.ALPHA,
                  rule: judge.Rule = judge.Rule()) -> list[Change]:
    """The change points of ``s``'s first ``upto`` nights (``places``), each with its commit
    range and cause."""
    x = s.values[:upto]
    found = places(s, upto, significance, rule)
    cuts = changepoints.segments(len(x), found)
    out = []
    for c, (a, _), (_, b) in zip(found, cuts, cuts[1:]):
        r = math.expm1(_median(x[c.index:b]) - _median(x[a:c.index]))
        before, after = s.nights[c.index - 1], s.nights[c.index]
        cause, what = cause_of(before, after, r)
        out.append(Change(c.index, c.p_value, r, before, after, cause, what))
    return out


def judge_trend(s: Series, rule: judge.Rule = judge.Rule(),
                significance: float = changepoints.ALPHA) -> Trend:
    """The trend of ``s``: its change points and the newest night's verdict (the module
    docstring)."""
    n = len(s.nights)
    found = change_points(s, n, significance, rule)
    start = found[-1].index if found else 0
    t = Trend(s, found, (start, _reference(s, start) + 1 if n > 1 else 0))
    if n < 2:
        t.message = "one night: nothing to judge it against"
        return t
    seg, new = s.values[start:t.stable[1]], s.nights[-1]
    own, _ = noise.pooled([list(seg)])
    t.s = own
    spread = own if math.isfinite(own) else rule.noise
    r = new.value - _median(seg)
    se = spread * math.sqrt(1 / len(new.runs) + figures.MEDIAN_SE ** 2 / max(len(seg), 1))
    t.change = math.expm1(r)
    # the segment's own spread is measured from its few nights: Student's t, as a confirmation
    df = len(seg) - 1 if math.isfinite(own) else math.inf
    t.p_value = figures.tail(r / se, df) if se > 0 else float(r <= 0)
    _verdict(t, r, se, rule, df)
    return t


def _reference(s: Series, start: int) -> int:
    """The night the newest is judged against, from ``start`` on: the last before it of
    another code (commit or programs, ``noise.code``), so that the nights of the newest's own
    code, the changed ones, stay out of the stable segment's spread and its cause is read where
    the code changed; the night before the newest where every night since ``start`` ran its
    code (then what moved is the host)."""
    newest = noise.code(s.nights[-1].newest)
    other = [i for i in range(start, len(s.nights) - 1)
             if noise.code(s.nights[i].newest) != newest]
    return other[-1] if other else len(s.nights) - 2


def _verdict(t: Trend, r: float, se: float, rule: judge.Rule, df: float = math.inf) -> None:
    """``t``'s verdict, cause and message from the change ``r`` and its error ``se`` (``df``
    degrees of freedom: Student's t; inf: the normal)."""
    s, new = t.series, t.series.nights[-1]
    ref, after = s.nights[t.stable[1] - 1], s.nights[t.stable[1]]  # where the code changed
    fail_on, alpha = dict(rule.fail_on), rule.alpha
    step = _threshold(rule)
    effs = np.array([n.efficiency for n in s.nights[t.stable[0]:t.stable[1]]], float)
    x = {"step": r, "efficiency": figures.log_ratio(_median(effs), new.efficiency)}
    crossed = [m for m, v in fail_on.items()
               if math.isfinite(x[m]) and figures.worse(x[m], se, v, alpha, df)]
    where = (f"{s.figure} {t.change:+.1%} against nights {s.nights[t.stable[0]].name} to "
             f"{ref.name} (median of {t.stable[1] - t.stable[0]}), p={t.p_value:.2g}, noise "
             + (f"s={t.s:.3f} (their own spread)" if math.isfinite(t.s)
                else f"{rule.noise:g} (the constant: under {history.MIN_NIGHTS} nights)"))
    if not math.isfinite(r):
        t.verdict, t.cause, t.message = judge.INCONCLUSIVE, judge.NOISE, "no figure to judge"
    elif not crossed:
        shaky = figures.unstable(t.s, step, alpha)
        faster = figures.worse(-r, se, step, alpha, df)
        t.verdict = (judge.UNSTABLE if shaky and not faster else
                     judge.IMPROVEMENT if faster else judge.OK)
        t.cause = judge.SPREAD if t.verdict == judge.UNSTABLE else judge.NOISE
        t.message = ("its nights spread too wide to judge at the threshold: " if shaky else
                     "faster: " if faster else "not slower beyond noise: ") + where
    else:
        cause, what = cause_of(ref, new, t.change)
        if after is not new:
            what += f" (nights {after.name} to {new.name} ran its code)"
        cores = _cores(ref, new)
        if cause != judge.PROGRAM and math.isfinite(cores) and not figures.worse(
                r - cores, se, step, alpha, df):
            t.verdict, t.cause = judge.INCONCLUSIVE, HOST
            t.message = (f"{where}; the host's cores ran as much slower "
                         f"({math.expm1(-cores):+.0%}): rerun on a steady host to tell")
        else:
            t.verdict, t.cause = judge.REGRESSION, cause
            t.message = f"{what}; {where}; commits {ref.commit[:12]}..{after.commit[:12]}"


def _cores(a: Night, b: Night) -> float:
    """The log of night ``a``'s probe cores' speed over ``b``'s (> 0: ``b``'s ran slower)."""
    return figures.log_ratio(evidence.host(a.newest)["cores"], evidence.host(b.newest)["cores"])



def with_newest_reruns(t: Trend, runs: list, rule: judge.Rule = judge.Rule(),
                significance: float = changepoints.ALPHA) -> Trend:
    """``t`` judged again with ``runs`` (reruns of its newest night) pooled into that night."""
    s, new = t.series, t.series.nights[-1]
    pooled = history.night(new.name, [*new.runs, *runs], s.figure)
    again = judge_trend(history.series_of(s.key, [*s.nights[:-1], pooled], s.figure), rule,
                        significance)
    held = again.verdict == judge.REGRESSION
    again.message = (f"{'confirmed' if held else 'not confirmed'}: the newest night with "
                     f"{len(runs)} reruns in fresh processes is "
                     f"{'still' if held else 'no longer'} a regression; {again.message}")
    return again


def confirm_newest(t: Trend, n: int, out: Path, rule: judge.Rule = judge.Rule(),
            significance: float = changepoints.ALPHA, installed: str | None = None) -> Trend:
    """``t`` (a regression) with its newest run rerun ``n`` times in fresh processes, stored
    under ``out`` (``harness.regress.confirm``: a workload run of the commit installed here),
    then judged again (``with_newest_reruns``); else said unconfirmed."""
    from harness.capture.environment import git_state
    from harness.regress import confirm as reruns
    from harness.sweep import repeat

    run = t.series.nights[-1].newest
    installed = installed if installed is not None else git_state().get(schema.GIT_SHA)
    reason = reruns.why_not(run, installed)
    if reason is not None:
        t.message = f"{t.message}; {reason}"
        return t
    p = reruns.point(run)
    return with_newest_reruns(t, [repeat.fresh(p, out / p.key, False, i) for i in range(n)],
                              rule, significance)
