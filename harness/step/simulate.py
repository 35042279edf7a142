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
from harness.hlo.ir import Module
from harness.hlo.walk import executed
from harness.step.play import COMM, COMPUTE, KINDS, Player, TimedSchedule
from harness.step.timeline import merged
from harness.step.transfers import LINK_RULES
from predictions.rules import STRUCTURAL

log = logging.getLogger(__name__)

MAX_PLAYED = 5_000_000  # op executions per step played at most (about 1 GB and 10 s)


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
    timed = TimedSchedule(module, core_s, transfer_s, links, comm)
    timed.of(module.entry.name)  # every lane known before the play starts
    player = Player(timed)
    player.play(module.entry.name)
    start, end = np.asarray(player.start, float), np.asarray(player.end, float)
    kind = np.asarray(player.kind)
    compute, comm_mask = kind == COMPUTE, kind == COMM
    compute_s, comm_s = _union(start[compute], end[compute]), _union(start[comm_mask],
                                                                      end[comm_mask])
    overlapped = compute_s + comm_s - _union(start, end)
    path = _critical_path(player)
    spans = pd.DataFrame({schema.OP: player.op,
                          schema.LANE: pd.Categorical.from_codes(player.lane, timed.lane_names),
                          schema.KIND: pd.Categorical(kind, categories=KINDS),
                          schema.START_S: start, schema.END_S: end}, columns=list(SPANS))
    if timed.missing:
        log.info("%s: %d executed ops have no duration (taken as 0 s), e.g. %s", module.name,
                 len(timed.missing), ", ".join(list(timed.missing)[:3]))
    return Simulated(
        step_s=float(end.max()) if len(end) else 0.0, compute_s=compute_s, comm_s=comm_s,
        overlapped_comm_s=overlapped, exposed_comm_s=comm_s - overlapped,
        serial_s=player.serial, sync_comm_s=player.sync, critical_path=path,
        critical_compute_s=sum(s for _, k, s in path if k == COMPUTE),
        critical_comm_s=sum(s for _, k, s in path if k == COMM), spans=spans,
        lanes=dict(timed.lane_about), missing=tuple(timed.missing), scheduled=module.scheduled,
        links=links)


def _critical_path(player: Player) -> tuple[tuple[str, str, float], ...]:
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
