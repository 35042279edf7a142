"""Pipelined layouts in ``harness plan``: stages S, microbatches M and the schedule searched
within the memory that fits, pruned with the book's model, the best few handed on to be
compiled beside the other layouts.

Every split of the N chips into S stages x X data-parallel replicas x Y-way TP (Y within a
GPU node or up to 16 on a TPU slice, dividing the heads; S at most L), every M dividing the
sequences a replica carries, and every schedule the workload runs (``gpipe``, ``1f1b``,
``circular`` with 2 repeats; 1F1B beside both a data and a model axis is refused by the
workload, so not tried) is priced by ``harness.plan.pipeline_book.price_pipeline``: the
bubble (S − 1)/(M + S − 1), /v circular (``predictions.pipeline.BUBBLE``), the stage's
compute and TP, the data-parallel reduction the pipeline shrinks (gpus.md: each replica
reduces 1/(S·Y) of the weights, so it gains bandwidth as the model-parallel group spans
nodes) and the memory a chip holds (weights L/S per stage, ZeRO-1 moments, the schedule's held
microbatches: M for GPipe, S for 1F1B). Options past the chip's HBM are pruned; the rest are
ranked by the book's step and the best of each layout is shown, the first ``COMPILED``
compiled. The pipelines searched are ZeRO-1 (weights whole per stage): gpus.md, ZeRO-3
"works badly" in a pipeline, its weights gathered again for every microbatch.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from harness import schema
from harness.errors import HarnessError
from harness.plan.layouts import PIPELINED, PLANNABLE, Candidate, n_ckpt, plannable
from harness.plan.pipeline_book import BF16, Priced, outer_s, price_pipeline, stage_layers
from harness.units import fmt_decimal_bytes, fmt_seconds
from predictions import training
from predictions.hardware import Chip
from predictions.network import System
from predictions.pipeline import outer_axis_gain
from predictions.topology import spans
from predictions.transformer import Config, param_count
from predictions.verdicts import Verdict

# the pipelined layouts (ZeRO-1) -> which (X, Y) they take: replicas over data, TP over model
SHAPES: dict[str, Callable[[int, int], bool]] = {
    "pp": lambda X, Y: Y == 1,
    "pp+tp": lambda X, Y: X == 1 and Y > 1,
    "pp+dp_tp": lambda X, Y: X > 1 and Y > 1,
}
assert tuple(SHAPES) == PIPELINED  # harness plan tries these unless told
CIRCULAR_REPEATS = (2,)     # v tried for the circular schedule (MaxText's, Meta's interleave)
TPU_MAX_TP = 16             # gpus.md / training.md: TP in practice 8-16-way
SHOWN = 3                   # pipelined rows in the table: the best of each layout
COMPILED = 2                # of which compiled (a real-size pipelined compile takes minutes)
PINNED = ("stages", "microbatches", "schedule", "repeats")  # --set fields that fix the search
# the pipelined rows' own columns (beside schema.PLAN)
STAGES, MICROBATCHES, SCHEDULE, BUBBLE = "stages", "microbatches", "schedule", "bubble"
COLUMNS = (STAGES, MICROBATCHES, SCHEDULE, BUBBLE)
# every row's memory per chip by the book (training.md §6.3; a pipeline's: stage_memory)
BOOK_BYTES = "book_memory_bytes"
# a config's pipeline fields and their values without a pipeline (flat layouts reset them)
FLAT = {"stages": 1, "microbatches": 1, "schedule": "gpipe", "repeats": 1, "zero1": False,
        "pad_layers": False}


@dataclass(frozen=True)
class Option:
    """One pipelined layout: S x X x Y chips, M microbatches, a schedule and its repeats."""

    layout: str
    S: int
    X: int
    Y: int
    M: int
    schedule: str
    v: int
    spans: tuple[int, int, int]
    priced: Priced

    @property
    def step_s(self) -> float:
        return self.priced.step.step_s


@dataclass
class Search:
    """What the search kept (fits the HBM, fastest by the book first) and what it pruned."""

    kept: list[Option]
    tried: int
    over_memory: int
    budget: float
    least: Option | None = None  # the option needing the least memory (when none fits)
    valid: dict[str, set] = field(default_factory=dict)

    def note(self) -> str:
        said = (f"pipelines: {self.tried} options (stages x replicas x TP, microbatches, "
                f"schedule) priced by the book, {self.over_memory} past "
                f"{fmt_decimal_bytes(self.budget)} of HBM pruned")
        if not self.kept and self.least is not None:
            said += (f"; none fits: the least needs "
                     f"{fmt_decimal_bytes(self.least.priced.need_bytes)} a chip")
        return said


def divisors(n: int, low: int = 1, high: int | None = None) -> list[int]:
    return [k for k in range(low, min(n, high or n) + 1) if n % k == 0]


def tp_degrees(cfg, chip: Chip, N: int, system: System | None) -> list[int]:
    """Y: powers of two dividing N and the query heads, K dividing Y or Y dividing K, within
    a GPU's NVLink domain (gpus.md) or up to ``TPU_MAX_TP``."""
    top = (system.domain if system is not None else chip.chips_per_node) \
        if chip.kind == "gpu" else TPU_MAX_TP
    return [y for y in (2 ** k for k in range(int(math.log2(max(top, 1))) + 1))
            if N % y == 0 and cfg.N % y == 0 and (cfg.K % y == 0 or y % cfg.K == 0)]


def _schedules(S: int, M: int, X: int, Y: int, L: int) -> list[tuple[str, int]]:
    out = [("gpipe", 1)]
    if not (X > 1 and Y > 1):  # workloads.llama.pipeline._check_1f1b
        out.append(("1f1b", 1))
    out += [("circular", v) for v in CIRCULAR_REPEATS if M >= S and S * v <= L]
    return out


def _layout(X: int, Y: int, names: Sequence[str]) -> str | None:
    return next((n for n in names if SHAPES[n](X, Y)), None)


def search(cfg, model: Config, chip: Chip, topology: Sequence[int], system: System | None,
           names: Sequence[str], pinned: Mapping[str, str], n_ckpt: float) -> Search:
    """Every pipelined option of ``names`` on the ``prod(topology)`` chips, priced; those
    within the chip's HBM kept, fastest by the book first. ``pinned``: ``--set`` stages,
    microbatches, schedule or repeats, which fix the search (HarnessError naming the valid
    values when none takes them)."""
    N, tokens = math.prod(topology), cfg.B * cfg.T
    budget, P = chip.hbm_bytes, None
    kept, tried, over, least = [], 0, 0, None
    valid: dict[str, set] = {k: set() for k in PINNED}
    for Y in tp_degrees(cfg, chip, N, system):
        for S in divisors(N // Y, 2, model.L):
            X = N // (S * Y)
            name = _layout(X, Y, names)
            if name is None or cfg.B % X:
                continue
            dims, m = (S, X, Y), spans((S, X, Y), topology)
            P, dp = P or BF16 * param_count(model), None  # dp: priced once, when first needed
            for M in divisors(cfg.B // X):
                for schedule, v in _schedules(S, M, X, Y, model.L):
                    values = {"stages": S, "microbatches": M, "schedule": schedule,
                              "repeats": v}
                    for k, val in values.items():
                        valid[k].add(val)
                    if any(str(values[k]) != str(pinned[k]) for k in pinned):
                        continue
                    if dp is None:
                        dp = outer_s("all-reduce", P / (S * Y), dims, 1, chip, m[1], system)
                    priced = price_pipeline(model, tokens, cfg.T, chip, dims, m, schedule, M, v,
                                            n_ckpt, system, dp)
                    option = Option(name, S, X, Y, M, schedule, v, m, priced)
                    tried += 1
                    if least is None or priced.need_bytes < least.priced.need_bytes:
                        least = option
                    if priced.need_bytes > budget:
                        over += 1
                    else:
                        kept.append(option)
    _check_pinned(pinned, valid, tried, names, N)
    kept.sort(key=lambda o: o.step_s)
    return Search(kept, tried, over, budget, least, valid)


def _check_pinned(pinned: Mapping[str, str], valid: dict[str, set], tried: int,
                  names: Sequence[str], N: int) -> None:
    """One line when a pinned value is none the search can take, naming the valid ones."""
    for k, val in pinned.items():
        ok = sorted(valid[k], key=lambda x: (isinstance(x, str), x))
        if str(val) not in {str(x) for x in ok}:
            raise HarnessError(f"--set {k}={val}: no pipelined layout ({', '.join(names)}) on "
                               f"{N} chips takes it; valid {k}: "
                               f"{', '.join(map(str, ok)) or 'none (no pipeline fits)'}")
    if pinned and not tried:
        said = ", ".join(f"{k}={v}" for k, v in pinned.items())
        raise HarnessError(f"--set {said}: no pipelined layout on {N} chips takes them "
                           f"together; valid stages: "
                           f"{', '.join(map(str, sorted(valid['stages'])))}")


def best(found: Search, shown: int = SHOWN) -> list[Option]:
    """The best option of each layout, fastest first, at most ``shown``."""
    out, seen = [], set()
    for o in found.kept:
        if o.layout not in seen:
            seen.add(o.layout)
            out.append(o)
    return out[:shown]


def candidate(o: Option, rank: int, of: int, compile_: bool) -> Candidate:
    """The plan's candidate of option ``o`` (the ``rank``-th of ``of`` kept)."""
    return Candidate(o.layout, o.X, o.Y, o.spans[1], o.spans[2],
                     f"pipeline {rank} of {of} that fit, by the book's step" if rank else
                     "no pipeline fits: the one needing the least memory",
                     S=o.S, microbatches=o.M, schedule=o.schedule, repeats=o.v,
                     compile=compile_)


def book_row(cand: Candidate, model: Config, tokens: float, T: int, chip: Chip,
             system: System | None, n_ckpt: float, dtype: str) -> dict:
    """The book's columns of a pipelined row: the data-parallel (or TP) condition the pipeline
    relieves, with the bubble beside it, the book's step and the pipeline's own figures."""
    dims, m = (cand.S, cand.X, cand.Y), (1, cand.M_X, cand.M_Y)
    priced = price_pipeline(model, tokens, T, chip, dims, m, cand.schedule, cand.microbatches,
                            cand.repeats, n_ckpt, system)
    if cand.X > 1:  # gpus.md: B/X > C/W_collective, the outer axis widened by the pipeline
        v = training.verdict("dp", tokens, chip, cand.X, cand.Y, (cand.M_X, cand.M_Y), model.F,
                             dtype, system=system, inner=cand.S)
    elif cand.Y > 1:
        v = training.verdict("tp", tokens, chip, 1, cand.Y, (1, cand.M_Y), model.F, dtype,
                             system=system, inner=cand.S)
    else:
        v = hop_verdict(priced.step, cand.S, cand.microbatches)
    share = priced.step.bubble
    wider = ""
    if system is not None and chip.kind == "gpu" and cand.X > 1:  # gpus.md, LLaMA-3's 16x
        gain = outer_axis_gain(cand.S, cand.Y, system.domain)
        wider = f", the outer axis {gain:g}x wider" if gain > 1 else ""
    return {schema.BOOK_CONDITION: f"{v.condition}{wider}; bubble {share:.1%}",
            schema.BOOK_BOUND: v.bound, schema.ANALYTIC_S: priced.step.step_s,
            STAGES: cand.S, MICROBATCHES: cand.microbatches,
            SCHEDULE: cand.schedule + (f" v={cand.repeats}" if cand.repeats > 1 else ""),
            BUBBLE: share, BOOK_BYTES: priced.need_bytes}


def hop_verdict(step, S: int, M: int) -> Verdict:
    """A lone pipeline (no data or model axis): each hop of a microbatch's activations,
    2BD/(W·N_MB) (gpus.md), against the stage's forward of that microbatch (a third of its
    work, transformers.md): compute-bound while the hop is shorter."""
    hop, fwd = step.hops_s / (2 * (S - 1)), step.work_s / (3 * M)
    ok = hop < fwd
    return Verdict("pp", hop, fwd, "compute" if ok else "comm",
                   f"hop 2BD/(W*M)={fmt_seconds(hop)} {'<' if ok else '>='} a microbatch's "
                   f"stage forward={fmt_seconds(fwd)}")


def pipeline_sets(cand: Candidate, cfg) -> dict[str, str]:
    """The config fields a pipelined candidate runs with (ZeRO-1; identity layers where S·v
    does not divide L); a flat one resets those the preset set."""
    if cand.S <= 1:
        return {k: str(v).lower() for k, v in FLAT.items() if getattr(cfg, k, v) != v}
    pad = stage_layers(cfg.L, cand.S, cand.repeats) * cand.S != cfg.L
    return {"stages": str(cand.S), "microbatches": str(cand.microbatches),
            "schedule": cand.schedule, "repeats": str(cand.repeats),
            "zero1": "true" if cand.X > 1 else "false", "pad_layers": str(pad).lower()}


def plan_candidates(workload: str, cfg, chip: Chip, topology: Sequence[int],
                    system: System | None, names: Sequence[str], overrides: Mapping[str, str],
                    compile_: bool, alone: bool = False) -> tuple[list[Candidate], str]:
    """``harness plan``'s pipelined candidates of ``names`` (the best of each layout, the
    first ``COMPILED`` compiled when ``compile_``; when none fits, the one needing the least
    memory, priced by the book) and a note on the search. ``alone``: only pipelines were
    asked for, so none that can be built is an error (one line)."""
    if not names:
        return [], ""
    pinned = {k: overrides[k] for k in PINNED if k in overrides}
    found = search(cfg, PLANNABLE[workload](cfg), chip, topology, system, names, pinned,
                   n_ckpt(cfg))
    if alone and not found.tried:
        N = math.prod(topology)
        raise HarnessError(f"layout {', '.join(names)}: no pipeline of the L={cfg.L} layers and "
                           f"B={cfg.B} sequences splits the {N} chips into stages (2 <= S <= "
                           f"L) x replicas (dividing B) x TP; valid: "
                           f"{', '.join(n for n in plannable() if n not in PIPELINED)}")
    chosen = best(found)
    if not chosen and found.least is not None:
        return [candidate(found.least, 0, 0, False)], found.note()
    ranks = [found.kept.index(o) + 1 for o in chosen]
    return ([candidate(o, r, len(found.kept), compile_ and i < COMPILED)
             for i, (o, r) in enumerate(zip(chosen, ranks))], found.note())
