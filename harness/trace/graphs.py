"""CUDA graphs (XLA's command buffers, on by default): the kernels launched inside one, attributed
to HLO ops from the program's schedule.

Every kernel launched inside a graph carries a ``cuda_graph_id`` stat and the graph's op as
``hlo_op`` (``command_buffer_24``), not its own. Such kernels are attributed here, from the
program's schedule (the caller's ``schedule_of(program)``, ``harness.hlo.schedule``: its ops in
order, as the trace names them):

- a fusion's kernel is named after it: ``loop_multiply_fusion_2`` is ``loop_multiply_fusion.2``
  (or the name itself, ``loop_broadcast_fusion``), checked against the HLO's instruction names;
- a library kernel (cuBLAS ``nvjet_*``/``sm90_*``, cuDNN, memcpy/memset) takes its place in the
  op sequence of the HLO schedule: between the ops of the named kernels before and after it,
  the one op no kernel is named after (or as many such ops as kernels, in order).

A kernel neither rule places keeps the graph's op (``command_buffer_24``): its time stays
visible as that row, its share of the step unattributed. (``harness.trace.gpu`` reads the
kernels.)
"""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MEMSET = "Memset"  # the name a memset kernel starts with
_KERNEL_SUFFIX = re.compile(r"_(\d+)$")  # loop_multiply_fusion_2 -> loop_multiply_fusion.2
# Kernels of libraries XLA calls through custom-calls: cuBLAS(Lt), CUTLASS, cuDNN.
_LIBRARY = re.compile(r"(nvjet|sm\d+_|cutlass|ampere|hopper|volta|turing|xmma|cublas|cudnn|gemm)",
                      re.IGNORECASE)
# Instructions that launch no kernel of their own (their work is charged elsewhere).
_NO_KERNEL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                        "after-all", "add-dependency", "opt-barrier", "domain", "while", "call",
                        "conditional", "partition-id", "replica-id", "async-update"})


@dataclass
class Kernel:
    start: int
    dur: int
    module: str
    op: str          # the HLO op: the kernel's own, or the graph's until attributed
    name: str        # the kernel's name
    in_graph: bool
    program_id: str = ""


@dataclass
class Schedule:
    """The HLO ops of a module as the trace names them, in schedule order per computation."""

    names: set = field(default_factory=set)
    position: dict = field(default_factory=dict)   # op -> (computation, index)
    order: dict = field(default_factory=dict)      # computation -> [op, ...]
    library: set = field(default_factory=set)      # ops that call a library (custom-calls)
    fusions: set = field(default_factory=set)      # ops whose kernels carry their name


def schedule(rows: Sequence[tuple[str, str, str]] | None) -> Schedule:
    """The ``Schedule`` of a program's ops in order; an empty one, with a warning, when the
    caller has none (no HLO)."""
    sched = Schedule()
    if not rows:
        log.warning("CUDA-graph kernels but no HLO schedule of the program: their time stays "
                    "with the command_buffer ops")
        return sched
    for name, opcode, computation in rows:
        sched.names.add(name)
        if opcode in _NO_KERNEL or opcode.endswith("-done"):
            continue
        ops = sched.order.setdefault(computation, [])
        sched.position[name] = (computation, len(ops))
        ops.append(name)
        if opcode == "custom-call":
            sched.library.add(name)
        elif opcode == "fusion":
            sched.fusions.add(name)
    return sched


def kernel_op(name: str, names: set) -> str | None:
    """The HLO op a kernel is named after (``loop_multiply_fusion_2`` -> ``.2``), or None."""
    candidate = _KERNEL_SUFFIX.sub(r".\1", name)
    if candidate in names:
        return candidate
    return name if name in names else None


def _between(a: str | None, b: str | None, sched: Schedule) -> list[str]:
    """The ops the schedule runs after ``a`` and before ``b`` (wrapping round a loop body;
    across computations: the rest of ``a``'s and the start of ``b``'s)."""
    pa, pb = sched.position.get(a), sched.position.get(b)
    if pa and pb and pa[0] == pb[0]:
        ops = sched.order[pa[0]]
        return ops[pa[1] + 1:pb[1]] if pa[1] < pb[1] else ops[pa[1] + 1:] + ops[:pb[1]]
    tail = sched.order[pa[0]][pa[1] + 1:] if pa else []
    head = sched.order[pb[0]][:pb[1]] if pb else []
    return tail + head


def _units(run: list[int], kernels: list[Kernel]) -> list[list[int]]:
    """A run of unplaced kernels as one unit per op launch: a memset joins the kernel after it
    (cuBLAS clears its output or workspace first)."""
    units, pending = [], []
    for r in run:
        pending.append(r)
        if not kernels[r].name.startswith(MEMSET):
            units.append(pending)
            pending = []
    if pending:
        units.append(pending)
    return units


def _match(units: list[list[int]], gap: list[str], greedy: bool = False
           ) -> list[tuple[list[int], str]]:
    """Pair units with gap ops: one op takes every unit; as many ops as units pair in order;
    ``greedy``: otherwise the first ops of the gap pair with the units in order (kernels
    start in schedule order, mostly: async ops may run ahead of their place)."""
    if len(gap) == 1:
        return [(u, gap[0]) for u in units]
    if len(gap) == len(units) or greedy:
        return list(zip(units, gap))
    return []


def _place(run: list[int], kernels: list[Kernel], gap: list[str], sched: Schedule) -> None:
    """Attribute one run of unplaced kernels to the ops of its gap in the schedule: all at
    once when the counts agree, else library kernels to custom-calls and the rest (memcpy
    kernels of async slices, copies) to the other ops, each kind on its own and in order."""
    units = _units(run, kernels)
    pairs = _match(units, gap)
    if not pairs:
        lib = [u for u in units if _LIBRARY.match(kernels[u[-1]].name)]
        rest = [u for u in units if not _LIBRARY.match(kernels[u[-1]].name)]
        pairs = (_match(lib, [op for op in gap if op in sched.library], greedy=True)
                 + _match(rest, [op for op in gap if op not in sched.library], greedy=True))
    for unit, op in pairs:
        for r in unit:
            kernels[r].op = op


def attribute(kernels: list[Kernel], sched: Schedule) -> None:
    """Give every graph kernel its HLO op (module docstring), in place."""
    if not sched.names:
        return
    placed: list[str | None] = []
    for k in kernels:
        if not k.in_graph:  # a kernel outside graphs names its op (an anchor, even if unknown)
            placed.append(k.op)
        else:
            placed.append(kernel_op(k.name, sched.names))
    for k, op in zip(kernels, placed):
        if op is not None and k.in_graph:
            k.op = op
    named = {op for op in placed if op}
    i, n = 0, len(kernels)
    while i < n:
        if placed[i] is not None:
            i += 1
            continue
        j = i
        while j < n and placed[j] is None:
            j += 1
        before = placed[i - 1] if i > 0 else None
        after = placed[j] if j < n else None
        gap = [op for op in _between(before, after, sched)
               if op not in named and op not in sched.fusions]
        _place(list(range(i, j)), kernels, gap, sched)
        i = j
