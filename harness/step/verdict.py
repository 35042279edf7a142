"""The step object's waits (``harness.step.waits``): the figures of the median step, and one line
of verdict and fix where one cause dominates (``VERDICTS``) or a straggler is named.

    dispatch-bound: the devices idle 20.3 ms per step while the runtime launches programs
    (91% of the 22.4 ms period): fewer, larger programs (jit the loop body)
    python-bound: the devices idle 20.1 ms per step while the host runs its own code between
    steps, outside the runtime (95% of the 21.2 ms period): ...
    process 1 reaches each all-reduce.3 19.8 ms late (last in 100% of steps)

("host" stays the regression verdicts' word for a busier machine: a wait on the host here is
"host-callback-bound".)
"""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.units import fmt_seconds

# a cause dominates when it holds this much of the waiting and this much of the period
DOMINANT = 0.5
WORTH = 0.1
_FIGURES = (schema.PERIOD_S, schema.WAITING_S, *schema.WAIT_CAUSES)


def _dispatch(t, share, period):
    return (f"dispatch-bound: the devices idle {fmt_seconds(t)} per step while the runtime "
            f"launches programs ({share:.0%} of the {fmt_seconds(period)} period): fewer, "
            f"larger programs (jit the loop body)")


def _python(t, share, period):
    return (f"python-bound: the devices idle {fmt_seconds(t)} per step while the host runs its "
            f"own code between steps, outside the runtime ({share:.0%} of the "
            f"{fmt_seconds(period)} period; no runtime event covers it: data loading, logging, "
            f"Python): dispatch the next step before blocking on the last, prefetch its input, "
            f"move the work off the step path")


# the causes of the time between steps a measuring loop spends (dispatching, its own Python)
_HOST_LOOP = (schema.WAIT_DISPATCH_S, schema.WAIT_PYTHON_S)
PACED = "paced by the harness"  # the bound of a step the harness's capture loop paced


def _paced(t, share, period):
    return (f"{PACED}: it waits on each step before dispatching the next, so the "
            f"devices idle {fmt_seconds(t)} between steps ({share:.0%} of the "
            f"{fmt_seconds(period)} period): its measuring loop's, not the program's; the "
            f"program's own loop under harness profile shows how it dispatches")


def _input(t, share, period):
    return (f"input-bound: {share:.0%} of the period waits on host-to-device copies "
            f"({fmt_seconds(t)} per step): prefetch to device")


def _peers(t, share, period):
    return (f"sync-bound: the devices wait {fmt_seconds(t)} per step at collectives for their "
            f"peers ({share:.0%} of the period), no device the last in most steps: even out "
            f"the work or the launches")


def _core(t, share, period):
    return (f"core-bound: device threads wait {fmt_seconds(t)} per step for a CPU core "
            f"({share:.0%} of the period), more device threads than the host has cores; fix: "
            f"run on no more devices than cores (harness --devices N)")


def _host(t, share, period):
    return (f"host-callback-bound: {share:.0%} of the period waits on host callbacks and "
            f"device-to-host transfers ({fmt_seconds(t)} per step): keep them out of the step")


VERDICTS = {schema.WAIT_DISPATCH_S: _dispatch, schema.WAIT_PYTHON_S: _python,
            schema.WAIT_INPUT_S: _input,
            schema.WAIT_PEERS_S: _peers, schema.WAIT_CORE_S: _core, schema.WAIT_HOST_S: _host}


def straggler_name(s: dict) -> str:
    """``device 3``, ``process 1``."""
    return f"{s[schema.STRAGGLER_UNIT]} {s[schema.STRAGGLER_ID]}"


def straggler_line(s: dict) -> str:
    """``device 3 reaches each all-reduce.1 0.4 ms late (last in 90% of steps)``."""
    return (f"{straggler_name(s)} reaches each {s[schema.OP]} "
            f"{fmt_seconds(s[schema.LATE_S])} late (last in {s[schema.LAST_SHARE]:.0%} of steps)")


def verdict(figures: dict, stragglers: list[dict], paced: bool = False) -> str:
    """The line: the straggler named, else the dominant cause's, else "". ``paced``: the
    harness's capture loop waited on each step, so a wait for dispatch or for the host's own
    work between steps is its loop's (``_paced``), not the program's."""
    if stragglers:
        return "; ".join(straggler_line(s) for s in stragglers)
    period, waiting = figures.get(schema.PERIOD_S, 0.0), figures.get(schema.WAITING_S, 0.0)
    if period <= 0:
        return ""
    cause = max(VERDICTS, key=lambda c: figures.get(c, 0.0))
    t = figures.get(cause, 0.0)
    if t < DOMINANT * waiting or t < WORTH * period:
        return ""
    say = _paced if paced and cause in _HOST_LOOP else VERDICTS[cause]
    return say(t, t / period, period)


def wait_figures(table: pd.DataFrame, untold: str = "",
                 stragglers: list[dict] | None = None, events: dict | None = None,
                 paced: bool = False, names: pd.DataFrame | None = None) -> dict:
    """The step object's waits from ``schema.WAITS``: each figure the mean over devices of the
    step whose mean period is the median (the lower of an even count: its causes add up as
    that step's did), the verdict, the causes not told apart, the stragglers and the host
    events the causes were read from (``events``: kind -> count); ``paced``: ``verdict``'s;
    ``names``: the python part by name (``schema.WAIT_NAMES``; ``named``)."""
    if table.empty:
        return {}
    per = table.groupby(schema.STEP)[list(_FIGURES)].mean()
    full = per.iloc[:-1] if len(per) > 1 else per  # the last step's period has no gap after it
    ordered = full.sort_values(schema.PERIOD_S, kind="stable")
    row = ordered.iloc[(len(ordered) - 1) // 2]
    out = {c: float(row[c]) for c in _FIGURES}
    top = named(names, row.name, int((table[schema.STEP] == row.name).sum()),
                out[schema.WAIT_PYTHON_S])
    if top:
        out[schema.WAIT_PYTHON_NAMES] = top
    out[schema.STRAGGLERS] = list(stragglers or [])
    out[schema.WAIT_EVENTS] = dict(events or {})
    line = verdict(out, out[schema.STRAGGLERS], paced)
    if line:
        out[schema.WAIT_VERDICT] = line
        out[schema.WAIT_BOUND] = (f"straggler: {straggler_name(out[schema.STRAGGLERS][0])}"
                                  if out[schema.STRAGGLERS] else line.split(":", 1)[0])
    if untold:
        out[schema.WAITS_UNTOLD] = untold
    return out


# the python wait's names the step object keeps: the longest few, each this share of it or more
NAMES_TOP = 3
NAMES_SHARE = 0.05


def named(names: pd.DataFrame | None, step: int, rows: int, part: float) -> dict[str, float]:
    """The python ``part`` of step ``step`` (seconds, the mean over its ``rows`` devices) by
    name, as ``wait_figures`` keeps it: each name's mean over the devices, the
    ``NAMES_TOP`` longest of ``NAMES_SHARE`` of it or more, longest first ({} for none)."""
    if names is None or names.empty or part <= 0 or not rows:
        return {}
    mine = names[names[schema.STEP] == step]
    per = (mine.groupby(schema.EVENT_NAME, observed=True)[schema.WAIT_PYTHON_S].sum() / rows
           ).sort_values(ascending=False, kind="stable")
    per = per[per >= NAMES_SHARE * part].iloc[:NAMES_TOP]
    return {str(k): float(v) for k, v in per.items()}
