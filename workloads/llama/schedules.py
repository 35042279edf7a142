"""Pipeline schedules: which stage works on which microbatch at each tick (`training.md` and
`gpus.md` on pipelining, reference §6.2; GPipe: Huang et al. 2019; 1F1B: Narayanan et al. 2021;
circular/interleaved: Narayanan et al. 2021 §2.2, run as MaxText's circular pipeline).

Plain Python (no jax): ``workloads.llama.pipeline`` runs these tables, and the step analysis
counts the bubble from the table of the schedule that ran (``idle_slots``, ``bubble``).

A schedule gives, for each tick (one iteration of the pipeline loop, every stage stepping in
lockstep and handing its activations on with one ``ppermute``), each stage's forward and
backward work as ``Work(microbatch, repeat)`` or None (an idle slot). With S stages, M
microbatches and v repeats (circular: each stage holds v chunks of L/(S·v) layers):

- ``gpipe``: every forward, then every backward in reverse (what autodiff of the loop over
  ticks runs): stage s forwards microbatch t − s at tick t; M + S − 1 forward ticks.
- ``1f1b``: one forward and one backward per tick once the pipeline is full (PipeDream-flush):
  stage s forwards microbatch t − s and back-propagates microbatch t − (2S − 2 − s), so a
  microbatch's gradient starts at the last stage in the tick of its forward; M + 2S − 2 ticks,
  each stage holding at most 2(S − s) − 1 microbatches in flight (the lockstep form of the
  published S − s, see ``in_flight``).
- ``circular``: GPipe's order over S·v chunks: stage s works on k = t − s, microbatch k mod M
  of repeat k div M; M·v + S − 1 forward ticks, each 1/v of a stage's layers.

The bubble counts time, not slots: a tick lasts as long as its slowest kind of work (a forward
costs 1, a backward 2: `transformers.md`'s 2 : 4 FLOPs, reference §5.1), and the bubble is the
share of stage-time in no work, which for GPipe and 1F1B is (S − 1)/(M + S − 1) and for
circular (S − 1)/(M·v + S − 1).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    """One slot's work: the microbatch and the repeat (0 unless circular)."""

    microbatch: int
    repeat: int = 0


@dataclass(frozen=True)
class Tick:
    """One tick: per stage, its forward and its backward (None: idle)."""

    forward: tuple[Work | None, ...]
    backward: tuple[Work | None, ...]


# Relative cost of a forward and a backward of one stage's chunk (transformers.md: the
# backward is twice the forward's FLOPs, reference §5.1).
FORWARD_COST, BACKWARD_COST = 1.0, 2.0


def forward_index(t, s, S: int, M: int, v: int = 1):
    """(k, valid): stage s's forward at tick t works on k = t − s (microbatch k mod M, repeat k
    div M); valid while 0 <= k < M·v. Arithmetic only: ints or jax arrays alike."""
    k = t - s
    return k, (k >= 0) & (k < M * v)


def backward_index(t, s, S: int, M: int):
    """(m, valid) for 1F1B: stage s back-propagates microbatch t − (2S − 2 − s) at tick t."""
    m = t - (2 * S - 2 - s)
    return m, (m >= 0) & (m < M)


def _forward_ticks(S: int, M: int, v: int) -> list[tuple[Work | None, ...]]:
    out = []
    for t in range(M * v + S - 1):
        row = []
        for s in range(S):
            k, ok = forward_index(t, s, S, M, v)
            row.append(Work(k % M, k // M) if ok else None)
        out.append(tuple(row))
    return out


def _gpipe(S: int, M: int, v: int = 1) -> list[Tick]:
    """All forwards, then the backwards in reverse tick order (autodiff of the loop)."""
    fwd = _forward_ticks(S, M, v)
    idle = (None,) * S
    return [Tick(f, idle) for f in fwd] + [Tick(idle, f) for f in reversed(fwd)]


def _one_f_one_b(S: int, M: int, v: int = 1) -> list[Tick]:
    ticks = []
    for t in range(M + 2 * S - 2):
        fwd, bwd = [], []
        for s in range(S):
            k, ok = forward_index(t, s, S, M)
            fwd.append(Work(k) if ok else None)
            m, ok = backward_index(t, s, S, M)
            bwd.append(Work(m) if ok else None)
        ticks.append(Tick(tuple(fwd), tuple(bwd)))
    return ticks


@dataclass(frozen=True)
class Schedule:
    """A registered schedule: its table, whether it repeats layers, whether autodiff of the
    forward loop gives its backward (else the pipeline runs its backward explicitly)."""

    name: str
    table: Callable[[int, int, int], list[Tick]]
    about: str
    circular: bool = False
    autodiff: bool = True


SCHEDULES: dict[str, Schedule] = {s.name: s for s in (
    Schedule("gpipe", _gpipe, "every forward, then every backward (Huang et al. 2019)"),
    Schedule("1f1b", _one_f_one_b, "one forward, one backward per tick once full "
             "(PipeDream-flush, Narayanan et al. 2021)", autodiff=False),
    Schedule("circular", _gpipe, "layers repeated over the stages v times, GPipe order "
             "(MaxText's circular pipeline; interleaved, Narayanan et al. 2021)",
             circular=True),
)}


def table(name: str, S: int, M: int, v: int = 1) -> list[Tick]:
    """The ticks of schedule ``name`` for S stages, M microbatches, v repeats."""
    return SCHEDULES[name].table(S, M, v)


def idle_slots(ticks: list[Tick]) -> int:
    """(stage, tick, kind) slots that carry no valid microbatch, counted over the slots of the
    kinds each tick runs (a tick with no backward anywhere has no backward slots)."""
    n = 0
    for tick in ticks:
        for row in (tick.forward, tick.backward):
            if any(w is not None for w in row):
                n += sum(w is None for w in row)
    return n


def tick_cost(tick: Tick, v: int = 1) -> float:
    """A lockstep tick lasts as long as the kinds of work any stage does in it (1/v of a
    stage's layers each in a circular pipeline)."""
    fwd = FORWARD_COST if any(w is not None for w in tick.forward) else 0.0
    bwd = BACKWARD_COST if any(w is not None for w in tick.backward) else 0.0
    return (fwd + bwd) / v


def bubble(ticks: list[Tick], v: int = 1) -> float:
    """Share of stage-time in no work: 1 − useful stage-time / (S · the step's time)."""
    S = len(ticks[0].forward)
    total = sum(tick_cost(t, v) for t in ticks)
    useful = sum((FORWARD_COST * sum(w is not None for w in t.forward)
                  + BACKWARD_COST * sum(w is not None for w in t.backward)) / v for t in ticks)
    return 1.0 - useful / (S * total)


def in_flight(ticks: list[Tick]) -> list[int]:
    """Per stage, the most microbatches forwarded and not yet back-propagated at once: the
    stage inputs (or residuals) the stage holds. GPipe: M; lockstep 1F1B: 2(S − s) − 1."""
    S = len(ticks[0].forward)
    held, most = [set() for _ in range(S)], [0] * S
    for tick in ticks:
        for s in range(S):
            if tick.forward[s] is not None:
                held[s].add(tick.forward[s])
            most[s] = max(most[s], len(held[s]))
            if tick.backward[s] is not None:
                held[s].discard(tick.backward[s])
    return most


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)


def check_config(cfg) -> None:
    """The pipeline fields of a train config (``stages``, ``microbatches``, ``schedule``,
    ``repeats``) against its L, B and layout: WorkloadError, one line naming the valid
    choices."""
    from predictions import layouts
    from workloads.base import WorkloadError, check_choice

    check_choice("schedule", cfg.schedule, SCHEDULES)
    S, M, v = cfg.stages, cfg.microbatches, cfg.repeats
    for name, value in (("stages", S), ("microbatches", M), ("repeats", v)):
        if value < 1:
            raise WorkloadError(f"{name} must be >= 1, got {value}")
    if cfg.B % M:
        raise WorkloadError(f"microbatches={M} does not divide the batch B={cfg.B}; valid: "
                            f"{_divisors(cfg.B)}")
    if v > 1 and not SCHEDULES[cfg.schedule].circular:
        circular = ", ".join(n for n, s in SCHEDULES.items() if s.circular)
        raise WorkloadError(f"repeats={v} is for a circular schedule ({circular}); "
                            f"schedule={cfg.schedule} runs repeats=1")
    if cfg.L % (S * v) and not cfg.pad_layers:
        ok = ", ".join(str(k) for k in range(1, cfg.L + 1) if cfg.L % (k * v) == 0)
        raise WorkloadError(f"stages={S} x repeats={v} does not divide the L={cfg.L} layers; "
                            f"valid stages: {ok} (or more layers, --set L={S * v * 2} or "
                            f"--preset tiny_pp; or --set pad_layers=true: identity layers on "
                            f"the first and last stages)")
    staged = "stage" in layouts.layout(cfg.parallelism).axes
    if S > 1 and not staged:
        pp = ", ".join(n for n, e in layouts.LAYOUTS.items() if "stage" in e.axes)
        raise WorkloadError(f"stages={S} needs a layout with a stage axis, got parallelism="
                            f"{cfg.parallelism}; valid: {pp}")
    if staged and SCHEDULES[cfg.schedule].circular and M < S:
        raise WorkloadError(f"schedule=circular needs microbatches >= stages (a microbatch "
                            f"waits at stage 0 for its next repeat); got microbatches={M}, "
                            f"stages={S}; valid microbatches: "
                            f"{', '.join(str(k) for k in range(S, cfg.B + 1) if cfg.B % k == 0)}")
