"""The steps of a capture, one at a time: each step's arguments, the timed call, the next
step's arguments; a warm-up that lasts until the program stops compiling again.

A step whose outputs come back laid out otherwise than its inputs (a Flax NNX FSDP step that
updates its model in place, a ``carry`` that threads outputs into the next step) makes jit
compile the next step again. ``settle`` compares the arguments before and after each warm-up
step (``arguments.signature``) and lowers and compiles anew for the new ones, up to
``MAX_RECOMPILES`` times: the compilation the program settles on is the one traced and
measured, and the notes say what changed.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from harness import schema
from harness.capture.arguments import changes, signature
from harness.errors import HarnessError, user_error
from harness.units import fmt_seconds

MAX_RECOMPILES = 3  # warm-up gives up on a program compiled anew more often than this
GRAPH_DIFF_NOTE = 0.05  # note when the user's executable's step differs by more than this


class Steps:
    """One step at a time of a program: the arguments of each step, the call (the timed part:
    dispatch to outputs ready), and the next step's arguments. ``carry(args, out)`` threads a
    step's outputs into them; without it, a program that donates inputs gets fresh copies of
    the donated arguments before each step (``fresh``), made outside the timed part (a donated
    buffer is gone after the step that took it), and every other program reuses ``args``.
    ``call(args, kwargs)`` is one step (``program.Executable.call``)."""

    def __init__(self, call: Callable, args: tuple, kwargs: dict, carry: Callable | None,
                 fresh, ran: list[int] | None = None):
        self.step, self.args, self.kwargs = call, args, kwargs
        self.carry, self.fresh = carry, fresh
        self.ran = ran if ran is not None else [0]  # steps run, shared with ``with_call``'s

    def with_call(self, call: Callable) -> Steps:
        return Steps(call, self.args, self.kwargs, self.carry, self.fresh, self.ran)

    def next_args(self) -> tuple:
        return self.fresh(self.args) if self.fresh else self.args

    def call(self, a: tuple):
        import jax

        res = self.step(a, self.kwargs)
        self.ran[0] += 1
        jax.block_until_ready(res)
        return res

    def done(self, a: tuple, res) -> None:
        if not self.carry:
            return
        try:
            self.args = tuple(self.carry(a, res))
        except Exception as e:
            err = user_error(e, "carry")
            if err is None:
                raise
            raise err from None

    def times(self, steps: int, cpu: list | None = None) -> list[float]:
        """Wall times of ``steps`` untraced steps, each waited on; each step's process CPU time
        appended to ``cpu`` when given."""
        out = []
        for _ in range(steps):
            a = self.next_args()
            c0, t0 = time.process_time(), time.perf_counter()
            res = self.call(a)
            out.append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.append(time.process_time() - c0)
            self.done(a, res)
        return out


def settle(run: Steps, warmup: int, recompile: Callable, names=()) -> tuple[Steps, list[str]]:
    """Run ``warmup`` untraced steps, and more while the program compiles anew: after a step
    whose arguments for the next come back with other shapes, dtypes or shardings,
    ``recompile(args, kwargs) -> call`` lowers and compiles for them, and one more step runs.
    Returns the steps on the settled program and what changed at each recompilation; raises
    after ``MAX_RECOMPILES``."""
    before = signature(run.args, run.kwargs, names)
    seen: list[str] = []
    done, pending = 0, False
    while done < warmup or pending:
        a = run.next_args()
        run.done(a, run.call(a))
        done += 1
        after = signature(run.args, run.kwargs, names)
        what = changes(before, after)
        pending = bool(what)
        if not pending:
            continue
        if len(seen) == MAX_RECOMPILES:
            raise HarnessError(f"the program still compiles anew after {MAX_RECOMPILES} "
                               f"recompilations in warm-up (step {done}: {what}); its steps "
                               f"must come to give the next step arguments laid out alike")
        seen.append(f"after warm-up step {done}: {what}")
        run, before = run.with_call(recompile(run.args, run.kwargs)), after
    return run, seen


def recompiled_note(name: str, changed: list[str]) -> str:
    """The run's note on a program compiled anew in warm-up: what ``settle`` found changed."""
    return (f"{name} was compiled {len(changed) + 1} times in warm-up: its steps gave the "
            f"next step arguments laid out otherwise ({'; then '.join(changed)}); the last "
            f"compilation is the one traced and measured")


def time_user_compile(own: Callable, step_s: float, run: Steps, steps: int) -> dict:
    """The step time of the user's own executable (``own``: jit's, XLA's default options),
    timed as ``step_s`` was (the traced executable's untraced steps), and a note when they
    differ by more than GRAPH_DIFF_NOTE."""
    mine = run.with_call(own)
    mine.times(1)  # warm up
    graph_s = statistics.median(mine.times(steps))
    run.args = mine.args
    out = {schema.GRAPH_STEP_S: graph_s}
    if step_s > 0 and abs(graph_s / step_s - 1) > GRAPH_DIFF_NOTE:
        out[schema.GRAPH_NOTE] = (f"the executable as compiled by default (command buffers on) "
                                  f"steps in {fmt_seconds(graph_s)} against "
                                  f"{fmt_seconds(step_s)} for the traced one "
                                  f"({graph_s / step_s - 1:+.0%})")
    return out
