"""The predicted step: one execution of a compiled program's schedule, played out.

The book's question (chapters 1, 3 and 5) is whether communication hides under compute: a step
takes max(T_math, T_comms) with perfect overlap and their sum with none. ``simulate`` answers it
for the schedule XLA chose, given each op's time for one execution (``core_s``: the op holds the
core; ``transfer_s``: an async pair's transfer in flight, keyed by its ``-start``):

- Order: each computation's instructions as printed, which in a scheduled module
  (``is_scheduled=true``) is the order XLA runs them; loops by trip count (the body ``n`` times,
  the condition ``n + 1``, nested loops multiplied through), ``call`` inlined, every branch of a
  ``conditional`` played (an upper bound, as ``walk.executed`` counts). A fusion is one op;
  structural instructions and containers take no time.
- One core: ops run one after another. An async ``-start`` (``predictions.rules.ASYNC_PAIRS``,
  and a TPU collective chain's start fusion, ``harness.hlo.tpu``) takes its own core time, then
  issues its transfer onto a link, which carries it from max(issue, link free); its ``-done``
  blocks the core until the transfer has landed, then takes its own core time (``-update``s
  are ordinary core ops). A synchronous collective (no start/done, as XLA:CPU and often
  XLA:TPU emit them) blocks the core for its time, once its link is free too.
- Links (``LINK_RULES``, the ``links`` argument): the sharding chapter prices a collective over
  some mesh axes with the whole bandwidth of those axes' links, and one over other axes uses
  other links (AllGather_XY gets twice the bandwidth of AllGather_X because it uses two axes).
  So by default (``"groups"``) transfers over the same device groups share one link, first come
  first served (for bandwidth-bound transfers the pair ends when it would sharing the
  bandwidth), transfers over different groups run in parallel, and memory copies
  (``copy-start``) share one DMA lane (they share HBM bandwidth), copies to or from host memory
  one lane per direction (PCIe is full duplex; a real TPU v6e trace waits on exactly the
  copies this predicts, ``tests/test_step_simulate.py``). ``"shared"`` puts every
  collective on one link (pessimistic where groups span disjoint axes); ``"parallel"`` gives
  every transfer its own (optimistic where they share axes).

Figures (``Simulated``), for one execution of the module: ``step_s`` the end of the last op or
transfer; ``compute_s`` the union of the compute ops' core time; ``comm_s`` the union of
transfers and the core time of communication ops (synchronous collectives, the halves of async
pairs); ``exposed_comm_s`` the part of ``comm_s`` with no compute running (the core waits on a
transfer or runs a collective: communication nothing hides); ``overlapped_comm_s`` the rest.
The core never idles except to wait on communication, so ``compute_s + exposed_comm_s ==
step_s``. The critical path is the chain of ops that sets the end: from the last one back
through whichever constraint set each start (the core's order, a transfer's landing, a busy
link), each op with the time it added.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.hlo.category import category
from harness.hlo.ir import Module
from harness.hlo.walk import executed, trip_count
from harness.step.timeline import merged
from harness.step.transfers import LINK_RULES, TransferOps, transfers
from predictions.rules import CONTAINERS, STRUCTURAL

log = logging.getLogger(__name__)

CORE = "core"
COMPUTE, COMM = "compute", "comm"
KINDS = (COMPUTE, COMM)
MAX_PLAYED = 5_000_000  # op executions per step played at most (about 1 GB and 10 s)
_OP, _START, _DONE, _PLAY, _LOOP = range(5)  # the steps of a computation's plan


@dataclass(frozen=True, eq=False)
class Simulated:
    """One played step (module docstring). ``critical_path``: (op, kind, seconds it added), in
    time order, one entry per execution; ``spans``: one row per op execution or transfer
    (``SPANS`` columns); ``lanes``: lane ("core", "ici", "ici 2", "dma", "h2d", ...) -> what it
    carries; ``missing``: executed ops given no duration (taken as 0 s); ``scheduled``: the
    order is XLA's schedule (else only a topological order)."""

    step_s: float
    compute_s: float
    comm_s: float
    overlapped_comm_s: float
    exposed_comm_s: float
    serial_s: float             # every duration one after another: the no-overlap bound
    sync_comm_s: float          # the core's time in synchronous collectives (exposed, all)
    critical_path: tuple[tuple[str, str, float], ...]
    critical_compute_s: float   # the critical path's compute time
    critical_comm_s: float      # its communication time
    spans: pd.DataFrame = field(repr=False)
    lanes: Mapping[str, str]
    missing: tuple[str, ...]
    scheduled: bool
    links: str


SPANS = (schema.OP, schema.LANE, schema.KIND, schema.START_S, schema.END_S)


class _Plan:
    """Each computation as a list of steps with their durations looked up once."""

    def __init__(self, module: Module, core_s: Mapping[str, float],
                 transfer_s: Mapping[str, float], links: str, comm: Collection[str] | None):
        self.module, self.core_s, self.transfer_s, self.comm = module, core_s, transfer_s, comm
        self.rule = LINK_RULES[links]
        self.lanes: dict = {}         # lane key -> lane index (0: the core)
        self.lane_names = [CORE]
        self.lane_about = {CORE: "the core: compute and synchronous communication, in order"}
        self.missing: dict[str, None] = {}
        self.steps: dict[str, list] = {}
        self.pairs: TransferOps = transfers(module)

    def lane(self, instr) -> int:
        key, about = self.rule(self.module, instr)
        if key not in self.lanes:  # named by its kind: "ici", "ici 2", "dma", ...
            kind = key[0] if isinstance(key, tuple) else str(key)
            n = sum(1 for k in self.lanes if (k[0] if isinstance(k, tuple) else str(k)) == kind)
            name = kind if n == 0 else f"{kind} {n + 1}"
            self.lanes[key] = len(self.lane_names)
            self.lane_names.append(name)
            self.lane_about[name] = about
        return self.lanes[key]

    def duration(self, table: Mapping[str, float], name: str, required: bool = True) -> float:
        if name in table:
            return float(table[name])
        if required:
            self.missing[name] = None
        return 0.0

    def is_comm(self, instr) -> bool:
        if self.comm is not None:
            return instr.name in self.comm
        return category(self.module, instr) == schema.CAT_COLLECTIVE

    def of(self, name: str) -> list:
        """The steps of a computation and of every one it plays (built once each)."""
        if name not in self.steps:
            self.steps[name] = self._build(name)
            for step in self.steps[name]:
                callees = step[1] if step[0] == _PLAY else step[1:3] if step[0] == _LOOP else ()
                for callee in callees:
                    self.of(callee)
        return self.steps[name]

    def _build(self, name: str) -> list:
        module, out = self.module, []
        for instr in module.computation(name).instructions:
            op = instr.opcode
            if op == "while":
                trips = trip_count(module, instr).n
                cond, body = instr.called("condition")[0], instr.called("body")[0]
                out.append((_LOOP, cond, body, trips))
            elif op in CONTAINERS:
                calls = [c for a in ("to_apply", "branch_computations", "true_computation",
                                     "false_computation") for c in instr.called(a)]
                out.append((_PLAY, tuple(calls)))
            elif op in STRUCTURAL:
                continue
            elif instr.name in self.pairs.done_of:
                out.append((_START, instr.name, self.duration(self.core_s, instr.name, False),
                            self.duration(self.transfer_s, instr.name), self.lane(instr)))
            elif instr.name in self.pairs.start_of:
                out.append((_DONE, instr.name, self.pairs.start_of[instr.name],
                            self.duration(self.core_s, instr.name, False)))
            else:
                comm = self.is_comm(instr)
                out.append((_OP, instr.name, COMM if comm else COMPUTE,
                            self.duration(self.core_s, instr.name),
                            self.lane(instr) if comm else -1))
        return out


class _Player:
    """The state of the step being played: the core, each link, the transfers in flight, and
    every event so far (op, lane, kind, start, end, the event that set its start)."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.core_t, self.core_last = 0.0, -1
        self.free = [0.0] * (len(plan.lane_names) + 1)
        self.last = [-1] * (len(plan.lane_names) + 1)
        self.flight: dict[str, int] = {}
        self.op, self.lane, self.kind, self.start, self.end, self.pred = [], [], [], [], [], []
        self.serial = self.sync = 0.0

    def event(self, op: str, lane: int, kind: str, start: float, end: float, pred: int) -> int:
        self.op.append(op)
        self.lane.append(lane)
        self.kind.append(kind)
        self.start.append(start)
        self.end.append(end)
        self.pred.append(pred)
        return len(self.end) - 1

    def play(self, computation: str, depth: int = 0) -> None:
        if depth > 64:
            raise HarnessError(f"computation {computation} nests control flow over 64 deep")
        for step in self.plan.of(computation):
            code = step[0]
            if code == _OP:
                _, name, kind, dur, lane = step
                start, pred = self.core_t, self.core_last
                if lane >= 0 and self.free[lane] > start:  # a collective waits for its link
                    start, pred = self.free[lane], self.last[lane]
                i = self.event(name, 0, kind, start, start + dur, pred)
                self.core_t, self.core_last = start + dur, i
                if lane >= 0:
                    self.free[lane], self.last[lane] = start + dur, i
                    self.sync += dur
                self.serial += dur
            elif code == _START:
                _, name, dur, flight, lane = step
                i = self.event(name, 0, COMM, self.core_t, self.core_t + dur, self.core_last)
                self.core_t, self.core_last = self.core_t + dur, i
                start, pred = self.core_t, i
                if self.free[lane] > start:  # the link is still carrying an earlier transfer
                    start, pred = self.free[lane], self.last[lane]
                j = self.event(name, lane, COMM, start, start + flight, pred)
                self.free[lane], self.last[lane] = start + flight, j
                self.flight[name] = j
                self.serial += dur + flight
            elif code == _DONE:
                _, name, start_name, dur = step
                ready, pred = self.core_t, self.core_last
                j = self.flight.pop(start_name, -1)
                if j >= 0 and self.end[j] > ready:  # blocks until the transfer has landed
                    ready, pred = self.end[j], j
                i = self.event(name, 0, COMM, self.core_t, ready + dur, pred)
                self.core_t, self.core_last = ready + dur, i
                self.serial += dur
            elif code == _LOOP:
                _, cond, body, trips = step
                self.play(cond, depth + 1)
                for _ in range(trips):
                    self.play(body, depth + 1)
                    self.play(cond, depth + 1)
            else:
                for callee in step[1]:
                    self.play(callee, depth + 1)


def _union(start: np.ndarray, end: np.ndarray) -> float:
    s, e = merged(start, end)
    return float((e - s).sum())


def simulate(module: Module, core_s: Mapping[str, float], transfer_s: Mapping[str, float],
             *, links: str = "groups", comm: Collection[str] | None = None) -> Simulated:
    """Play one execution of ``module``'s schedule (module docstring). ``core_s``: seconds
    each op holds the core per execution, by HLO name; ``transfer_s``: seconds each async
    pair's transfer is in flight, by its ``-start``'s name; ``links``: a ``LINK_RULES`` name;
    ``comm``: the names of the synchronous ops that communicate (default: category
    ``collective``)."""
    if links not in LINK_RULES:
        raise HarnessError(f"unknown link rule {links!r}; valid: {', '.join(LINK_RULES)}")
    if not module.scheduled:
        log.info("%s is not scheduled (no is_scheduled=true): its printed order is a "
                 "topological order, not necessarily the one XLA runs", module.name)
    played = sum(n for i, n in executed(module) if i.opcode not in STRUCTURAL)
    if played > MAX_PLAYED:
        raise HarnessError(f"the schedule of {module.name} runs {played:,} op executions per "
                           f"step, over the {MAX_PLAYED:,} a simulation plays; are its loops' "
                           "trip counts right?")
    plan = _Plan(module, core_s, transfer_s, links, comm)
    plan.of(module.entry.name)  # every lane known before the play starts
    player = _Player(plan)
    player.play(module.entry.name)
    start, end = np.asarray(player.start, float), np.asarray(player.end, float)
    kind = np.asarray(player.kind)
    compute, comm_mask = kind == COMPUTE, kind == COMM
    compute_s, comm_s = _union(start[compute], end[compute]), _union(start[comm_mask],
                                                                      end[comm_mask])
    overlapped = compute_s + comm_s - _union(start, end)
    path = _critical_path(player)
    spans = pd.DataFrame({schema.OP: player.op,
                          schema.LANE: pd.Categorical.from_codes(player.lane, plan.lane_names),
                          schema.KIND: pd.Categorical(kind, categories=KINDS),
                          schema.START_S: start, schema.END_S: end}, columns=list(SPANS))
    if plan.missing:
        log.info("%s: %d executed ops have no duration (taken as 0 s), e.g. %s", module.name,
                 len(plan.missing), ", ".join(list(plan.missing)[:3]))
    return Simulated(
        step_s=float(end.max()) if len(end) else 0.0, compute_s=compute_s, comm_s=comm_s,
        overlapped_comm_s=overlapped, exposed_comm_s=comm_s - overlapped,
        serial_s=player.serial, sync_comm_s=player.sync, critical_path=path,
        critical_compute_s=sum(s for _, k, s in path if k == COMPUTE),
        critical_comm_s=sum(s for _, k, s in path if k == COMM), spans=spans,
        lanes=dict(plan.lane_about), missing=tuple(plan.missing), scheduled=module.scheduled,
        links=links)


def _critical_path(player: _Player) -> tuple[tuple[str, str, float], ...]:
    """From the event that ends last back through the event that set each start; each with
    the time it added (its end minus its predecessor's)."""
    if not player.end:
        return ()
    end = player.end
    i = max(range(len(end)), key=end.__getitem__)
    chain = []
    while i >= 0:
        p = player.pred[i]
        chain.append((player.op[i], player.kind[i], end[i] - (end[p] if p >= 0 else 0.0)))
        i = p
    return tuple(reversed(chain))


def critical_ops(sim: Simulated, top: int = 10) -> pd.DataFrame:
    """The critical path summed per op: the seconds it added and how many of its executions
    (or transfers) added any, largest first; ops that added nothing left out."""
    df = pd.DataFrame([e for e in sim.critical_path if e[2] > 0],
                      columns=[schema.OP, schema.KIND, schema.CRITICAL_S])
    if df.empty:
        return pd.DataFrame(columns=[schema.OP, schema.KIND, schema.CRITICAL_S, schema.COUNT])
    out = df.groupby([schema.OP, schema.KIND], sort=False).agg(
        **{schema.CRITICAL_S: (schema.CRITICAL_S, "sum"), schema.COUNT: (schema.CRITICAL_S,
                                                                         "size")})
    return out.reset_index().sort_values(schema.CRITICAL_S, ascending=False,
                                         kind="stable").head(top).reset_index(drop=True)
