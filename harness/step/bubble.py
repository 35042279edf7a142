"""The pipeline bubble as a part of the step (`training.md` "Pipelining"; `gpus.md` "Pipeline
Parallelism"; reference §6.2): counted from the schedule the program ran, priced in time.

Counted from the run's record of its config (``stages`` S, ``microbatches`` M, ``schedule``,
``repeats`` v: ``schema.CONFIG`` in its meta) in the schedule's own table
(``workloads.llama.schedules``): of the (stage, tick, kind) slots the ticks run (a tick with no
backward anywhere runs no backward slots), those that carry no valid microbatch. For GPipe and
1F1B that is (S − 1)/(M + S − 1) (Huang et al. 2019; Narayanan et al. 2021), for a circular
pipeline (S − 1)/(v·M + S − 1): 4 stages x 8 microbatches, 24 of 88 slots, 27%.

The pipelined ``llama_train`` runs every stage every tick, valid microbatch or not (MaxText's
way, ``workloads.llama.pipeline``), so its bubble is compute on invalid microbatches, not idle
time: a part of the step's busy time, beside its waits (``harness.step.waits``), not one of
them. Priced in time: the schedule's bubble share of stage-time (a forward costs 1, a backward
2: ``schedules.bubble``, `transformers.md`, reference §5.1) times the measured stage loop (the
``while`` ops, run once a step, whose trip count is the schedule's ticks: GPipe and circular run
a forward loop and its transpose, 1F1B one loop; per device the loops' time summed per step,
the median over steps, then over devices). On 8 CPU devices that share 2 cores a stage's work
on an invalid microbatch takes a core from the others, and XLA:CPU's collectives are
rendezvous of the device threads: there the time is an estimate; the count is exact.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from harness import schema
from harness.hlo import Module, executed, trip_count
from harness.measure.ops import named
from harness.units import fmt_seconds
from predictions import pipeline


def count(schedule: str, S: int, M: int, v: int = 1) -> dict:
    """The bubble of ``schedule`` at S stages, M microbatches, v repeats, counted in its table:
    slots run, slots with no valid microbatch, their share, the share of stage-time
    (``schedules.bubble``), the ticks (iterations of the stage loop) and the share the
    published formula predicts (``predictions.pipeline.bubble``)."""
    from workloads.llama import schedules  # (the workloads package imports jax: only here)

    ticks = schedules.table(schedule, S, M, v)
    slots = sum(len(row) for tick in ticks for row in (tick.forward, tick.backward)
                if any(w is not None for w in row))
    idle = schedules.idle_slots(ticks)
    loop = len(ticks) // 2 if schedules.SCHEDULES[schedule].autodiff else len(ticks)
    return {"slots": slots, "idle_slots": idle, schema.BUBBLE_SHARE: idle / slots,
            "time_share": schedules.bubble(ticks, v), "ticks": loop,
            "predicted_share": pipeline.bubble(schedule, S, M, v)}


def stage_loops(module: Module | None, ticks: int) -> set[str]:
    """The ``while`` ops of ``module`` run once a step whose trip count is ``ticks``: the
    stage loop (and, for an autodiff schedule, its transpose)."""
    if module is None:
        return set()
    return {i.name for i, n in executed(module)
            if i.opcode == "while" and n == 1 and trip_count(module, i).n == ticks}


def loop_s(events: pd.DataFrame, loops: set[str]) -> float | None:
    """The stage loops' time per step: per (step, device) their intervals summed, the median
    over steps per device, then over devices; None where no event is of them."""
    ev = events[named(events[schema.OP], loops)] if loops else events.iloc[0:0]
    if ev.empty:
        return None
    per = ev.groupby([schema.STEP, schema.DEVICE], observed=True)[schema.DURATION_NS].sum()
    return float(per.groupby(level=schema.DEVICE).median().median()) * 1e-9


def bubble(config: Mapping | None, module: Module | None, events: pd.DataFrame,
           step: Mapping) -> dict:
    """The step object's bubble (module docstring) of a pipelined run (``config``: the run's
    workload config, None or without ``stages`` > 1: not pipelined, {}): the count
    (``schema.BUBBLE``), its share, its time where the stage loop is found in ``module``'s
    HLO and ``events`` (the step program's EVENTS), and the sentence the report prints."""
    config = config or {}
    S = int(config.get("stages") or 1)
    if S < 2 or "schedule" not in config:
        return {}
    M, v = int(config.get("microbatches") or 1), int(config.get("repeats") or 1)
    try:
        found = count(str(config["schedule"]), S, M, v)
    except (KeyError, ValueError):  # a schedule with no table here: no count to give
        return {}
    out_of = {"stages": S, "microbatches": M, "schedule": str(config["schedule"]),
              "repeats": v, **found}
    out = {schema.BUBBLE: out_of, schema.BUBBLE_SHARE: found[schema.BUBBLE_SHARE]}
    t = loop_s(events, stage_loops(module, found["ticks"]))
    if t is not None:
        out_of["loop_s"] = t
        out[schema.BUBBLE_S] = found["time_share"] * t
    out[schema.BUBBLE_LINE] = line(out, step.get(schema.STEP_S))
    return out


def line(b: Mapping, step_s: float | None = None) -> str:
    """``pipeline bubble: 27% of stage iterations carry no microbatch (24 of 88; predicted
    27%), 4 stages x 8 microbatches, 1f1b: 63.1 ms of the 231 ms stage loop (27% of its
    stage-time, 26% of the step), computed on invalid microbatches``."""
    c = b[schema.BUBBLE]
    repeats = f" x {c['repeats']} repeats" if c["repeats"] > 1 else ""
    head = (f"pipeline bubble: {b[schema.BUBBLE_SHARE]:.0%} of stage iterations carry no "
            f"microbatch ({c['idle_slots']} of {c['slots']}; predicted "
            f"{c['predicted_share']:.0%}), {c['stages']} stages x "
            f"{c['microbatches']} microbatches{repeats}, {c['schedule']}")
    if schema.BUBBLE_S not in b:
        return head + ": not priced (the stage loop is not in the trace's HLO)"
    of_step = f", {b[schema.BUBBLE_S] / step_s:.0%} of the step" if step_s else ""
    return (f"{head}: {fmt_seconds(b[schema.BUBBLE_S])} of the {fmt_seconds(c['loop_s'])} "
            f"stage loop ({c['time_share']:.0%} of its stage-time{of_step}), computed on "
            f"invalid microbatches")
