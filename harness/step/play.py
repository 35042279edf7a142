"""Playing a schedule (``harness.step.simulate``): each computation as a list of steps, its
durations looked up once (``TimedSchedule``), and the state of the step being played
(``Player``): the core, each link, the transfers in flight, and every event so far.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

from harness import schema
from harness.errors import HarnessError
from harness.hlo.category import category
from harness.hlo.ir import Module
from harness.hlo.walk import trip_count
from harness.step.transfers import LINK_RULES, TransferOps, transfers
from predictions.rules import CONTAINERS, STRUCTURAL

CORE = "core"
COMPUTE, COMM = "compute", "comm"
KINDS = (COMPUTE, COMM)
_OP, _START, _DONE, _PLAY, _LOOP = range(5)  # the steps of a computation's list


class TimedSchedule:
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


class Player:
    """The state of the step being played: the core, each link, the transfers in flight, and
    every event so far (op, lane, kind, start, end, the event that set its start)."""

    def __init__(self, timed: TimedSchedule):
        self.timed = timed
        self.core_t, self.core_last = 0.0, -1
        self.free = [0.0] * (len(timed.lane_names) + 1)
        self.last = [-1] * (len(timed.lane_names) + 1)
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
        for step in self.timed.of(computation):
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
