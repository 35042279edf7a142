"""The step as a whole in words: the line every report opens with (``step_line``) and the
book's bounds beside it (``bounds_line``), from a run's step object (``schema.STEP_OBJECT``).

    step 37.8 ms = compute 30.1 ms + exposed comm 6.3 ms (all-gather.3 4.1 ms, 65% exposed)
    + idle 1.4 ms; predicted 29.5 ms (replay 37.9 ms)
"""
from __future__ import annotations

from collections.abc import Mapping

from harness import schema
from harness.units import fmt_seconds

# a term shorter than this share of the step is left out of the line (it still is in the JSON)
_NEGLIGIBLE = 0.001


def _most_exposed(step: Mapping) -> str:
    """``(all-gather.3 4.1 ms, 65% exposed)``: the collective most exposed, if any is."""
    ops = step.get(schema.STEP_COLLECTIVES) or []
    if not ops or not ops[0].get(schema.EXPOSED_COMM_S):
        return ""
    top = ops[0]
    share = top[schema.EXPOSED_COMM_S] / top[schema.COMM_S] if top[schema.COMM_S] else 0.0
    return f" ({top[schema.OP]} {fmt_seconds(top[schema.COMM_S])}, {share:.0%} exposed)"


def step_line(step: Mapping) -> str:
    """One line: the measured step as compute + exposed communication + idle, then the
    predicted step where the schedule was simulated; "" without a measured step."""
    if not step.get(schema.STEP_S):
        return ""
    t = step[schema.STEP_S]
    parts = [f"compute {fmt_seconds(step[schema.COMPUTE_S])}"]
    if step.get(schema.COMM_S, 0) > 0:
        parts.append(f"exposed comm {fmt_seconds(step[schema.EXPOSED_COMM_S])}"
                     f"{_most_exposed(step)}")
    if step.get(schema.IDLE_S, 0) > _NEGLIGIBLE * t:
        parts.append(f"idle {fmt_seconds(step[schema.IDLE_S])}")
    line = f"step {fmt_seconds(t)} = " + " + ".join(parts)
    hidden = step.get(schema.OVERLAPPED_COMM_S, 0)
    if step.get(schema.COMM_S, 0) > 0:
        line += (f", {fmt_seconds(hidden) if hidden else 'none'} of "
                 f"{fmt_seconds(step[schema.COMM_S])} comm hidden under compute")
    else:
        line += " (no communication)"
    predicted, replay = step.get(schema.PREDICTED_STEP_S), step.get(schema.REPLAY_STEP_S)
    if predicted:
        line += f"; predicted {fmt_seconds(predicted)}"
        if replay:
            line += f" (replay {fmt_seconds(replay)})"
    elif replay:
        line += f"; replay {fmt_seconds(replay)}"
    return line


def where_line(step: Mapping) -> str:
    """Which device and how many steps the figures are of: "" for one device and one step."""
    devices = [d for d in step.get(schema.DEVICES) or [] if not d.get(schema.IDLE_DEVICE)]
    idle = [d[schema.DEVICE] for d in step.get(schema.DEVICES) or [] if d.get(schema.IDLE_DEVICE)]
    bits = []
    if len(devices) > 1:
        bits.append(f"device {step[schema.DEVICE]}, the slowest of {len(devices)}")
    if step.get(schema.STEPS, 1) > 1:
        bits.append(f"its median of {step[schema.STEPS]} steps")
    if idle:
        bits.append(f"{len(idle)} device(s) ran no op: {', '.join(map(str, idle[:8]))}")
    return "; ".join(bits)


def bounds_line(step: Mapping) -> str:
    """The book beside the step (chapter 1): T_math, T_comms, max(...) and sum(...), and the
    regime, saying where the two terms come from; "" without them."""
    if schema.T_MATH_S not in step:
        return ""
    source = {"book": "the book's estimate of the workload",
              "hlo": "the compiled ops at their roofline"}.get(step.get(schema.BOUNDS_FROM), "")
    if not step[schema.T_COMMS_S]:
        return (f"book: T_math {fmt_seconds(step[schema.T_MATH_S])} and no communication: the "
                f"step's roofline is T_math" + (f" (from {source})" if source else ""))
    return (f"book: T_math {fmt_seconds(step[schema.T_MATH_S])}, T_comms "
            f"{fmt_seconds(step[schema.T_COMMS_S])} -> a step between "
            f"{fmt_seconds(step[schema.OVERLAP_BOUND_S])} (perfect overlap) and "
            f"{fmt_seconds(step[schema.SERIAL_BOUND_S])} (none); {step[schema.REGIME]}"
            + (f" (from {source})" if source else ""))


# each cause's word in the waits line (harness.step.waits)
_CAUSES = {schema.WAIT_DISPATCH_S: "dispatch", schema.WAIT_INPUT_S: "input",
           schema.WAIT_PYTHON_S: "python",
           schema.WAIT_PEERS_S: "peers", schema.WAIT_CORE_S: "a core",
           schema.WAIT_HOST_S: "host callbacks", schema.WAIT_UNEXPLAINED_S: "unexplained"}


def waits_line(step: Mapping) -> str:
    """``waiting 21.4 ms of the 22.4 ms period = dispatch 20.8 ms + peers 588 us + unexplained
    104 ns``: why the devices wait (``harness.step.waits``), the causes that took any time
    (unexplained always), python with the names the trace gives its time where it gives any
    (``python 20.4 ms (load_batch 20.1 ms)``); "" without the waits."""
    if not step.get(schema.PERIOD_S):
        return ""
    parts = [f"{word} {fmt_seconds(step.get(c, 0.0))}{_named(step, c)}"
             for c, word in _CAUSES.items()
             if step.get(c, 0.0) > 0 or c == schema.WAIT_UNEXPLAINED_S]
    return (f"waiting {fmt_seconds(step.get(schema.WAITING_S, 0.0))} of the "
            f"{fmt_seconds(step[schema.PERIOD_S])} period = " + " + ".join(parts))


def _named(step: Mapping, cause: str) -> str:
    """`` (load_batch 20.1 ms, log 1.2 ms)``: the names of a cause's time (the python wait's,
    ``schema.WAIT_PYTHON_NAMES``), "" for none."""
    names = step.get(schema.WAIT_PYTHON_NAMES) if cause == schema.WAIT_PYTHON_S else None
    if not names:
        return ""
    return " (" + ", ".join(f"{k} {fmt_seconds(v)}" for k, v in names.items()) + ")"


def step_lines(step: Mapping) -> list[str]:
    """The step line, where its figures come from, the book's bounds, and why the devices wait
    (the line of the causes, the verdict, the causes the trace cannot tell apart): the lines
    every report opens with (empty without a measured step)."""
    line = step_line(step)
    if not line:
        return []
    where = where_line(step)
    verdict = step.get(schema.WAIT_VERDICT)
    untold = step.get(schema.WAITS_UNTOLD)
    return [line + (f"  [{where}]" if where else ""),
            *filter(None, [bounds_line(step), waits_line(step),
                           verdict and f"verdict: {verdict}", step.get(schema.BUBBLE_LINE),
                           untold and f"waits: {untold}"])]
