"""What only the TPU compiler's HLO holds: its custom calls and async collective fusions.

Seen in modules compiled by libtpu (``tests/fixtures/tpu/``):

- Custom calls that are bookkeeping, not kernels. ``CUSTOM_CALL_AS`` prices each target by the
  rule of an ordinary opcode that does the same work (``predictions.rules.RULES``;
  ``harness.hlo.calls`` registers them).
- Async collective fusions: one collective is split across a chain of fusions that share a
  ``frontend_attributes={chain_id="k"}`` on a copy of the collective: ``async-collective-start``
  (root ``custom-call`` ``AsyncCollectiveStart``), continuation fusions where the transfer runs
  under a matmul (a collective matmul, `sharding.md`), and ``async-collective-done`` (root
  ``AsyncCollectiveDone``; ``chain_pairs`` pairs a start with its done). The data moves once:
  the start fusion is charged the collective; in continuations the copy is the same transfer
  in flight (the fusion is costed as the rest of its work), and the done fusion only waits
  (zero cost, like an async ``-done``).
- All-reduce-scatter fusions: where a program asks for a sum sharded (a matmul's
  ``out_sharding`` over its contracting axis, an FSDP gradient), XLA:TPU emits no
  ``reduce-scatter`` opcode but a ``kind=kCustom`` fusion whose body all-reduces and keeps each
  device's ``dynamic-slice`` of the sum, its offset worked out from ``partition-id``
  (``SingleInputAllReduceScatterFusion``, a ring). ``all_reduce_scatter`` reads that from the
  body, never from the fusion's name: the ring moves what a reduce-scatter moves, half an
  all-reduce's bytes (book §4.2: AllReduce = ReduceScatter + AllGather).
"""
from __future__ import annotations

import re

from harness.hlo.ir import Computation, Instruction, Module
from predictions.rules import Shape

# TPU custom-call target -> the opcode whose rule prices it
CUSTOM_CALL_AS: dict[str, str] = {
    "AllocateBuffer": "bitcast",                 # reserves a buffer: no work
    "AsyncCollectiveStart": "bitcast",           # starts the collective it takes as operand,
    "AsyncCollectiveDone": "bitcast",            # which is costed itself; the done only waits
    "AssumeGatherIndicesInBound": "bitcast",     # an assertion on gather indices, no work
    "GatherScatterIndicesBitpacked": "copy",     # packs gather indices: reads, writes them
    # joins the results of async slices that were written side by side into one buffer (the
    # splash kernels' Q, K, V split in halves): a new view, nothing moves
    "ConcatBitcast": "bitcast",
}
START, DONE = "AsyncCollectiveStart", "AsyncCollectiveDone"
COLLECTIVE_OPCODES = frozenset({"all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                                "collective-permute", "ragged-all-to-all"})
_CHAIN_RE = re.compile(r'chain_id="([^"]*)"')
# what a value passes through unchanged between an all-reduce and the slice of it a device keeps
_VIEWS = frozenset({"get-tuple-element", "bitcast"})
_IDS = frozenset({"partition-id", "replica-id"})


def _target(instr: Instruction) -> str:
    return str(instr.attrs.get("custom_call_target", "")).strip('"')


def chain_role(module: Module, fusion: Instruction) -> str | None:
    """"start" | "done" | "continue" for a fusion in an async collective chain, else None."""
    if fusion.opcode != "fusion" or not fusion.called("calls"):
        return None
    cache = module.derived.chain_roles
    if fusion.name not in cache:
        body = module.computation(fusion.called("calls")[0])
        role = None
        if body.root.opcode == "custom-call" and _target(body.root) in (START, DONE):
            role = "start" if _target(body.root) == START else "done"
        elif any(i.opcode in COLLECTIVE_OPCODES and _CHAIN_RE.search(
                str(i.attrs.get("frontend_attributes", ""))) for i in body.instructions):
            role = "continue"
        cache[fusion.name] = role
    return cache[fusion.name]


def in_flight(module: Module, fusion: Instruction, inner: Instruction) -> bool:
    """True for the copy of a chained collective inside a continuation or done fusion: the
    transfer the chain's start fusion is charged for."""
    return (inner.opcode in COLLECTIVE_OPCODES
            and chain_role(module, fusion) in ("continue", "done")
            and _CHAIN_RE.search(str(inner.attrs.get("frontend_attributes", ""))) is not None)



def chain_id(module: Module, fusion: Instruction) -> str | None:
    """The ``chain_id`` of the collective a chain fusion holds (start, continuation or done)."""
    for inner in module.computation(fusion.called("calls")[0]).instructions:
        m = _CHAIN_RE.search(str(inner.attrs.get("frontend_attributes", "")))
        if m is not None and inner.opcode in COLLECTIVE_OPCODES:
            return m.group(1)
    return None


def chain_pairs(module: Module, computation: str) -> dict[str, str]:
    """Each async collective chain of one computation: its start fusion's name -> its done
    fusion's, the two holding a copy of the collective with one ``chain_id``."""
    starts, pairs = {}, {}
    for instr in module.computation(computation).instructions:
        role = chain_role(module, instr)
        if role == "start":
            starts[chain_id(module, instr)] = instr.name
        elif role == "done" and chain_id(module, instr) in starts:
            pairs[starts.pop(chain_id(module, instr))] = instr.name
    return pairs


def collective(module: Module, fusion: Instruction) -> Instruction | None:
    """The collective a fusion's body holds (None for none, or for no fusion)."""
    calls = fusion.called("calls") if fusion.opcode == "fusion" else ()
    if not calls:
        return None
    return next((i for i in module.computation(calls[0]).instructions
                 if i.opcode in COLLECTIVE_OPCODES), None)


def _group_size(instr: Instruction, module: Module) -> int:
    groups = instr.attrs.get("replica_groups")
    if groups is None or isinstance(groups, str):
        return 0
    return module.num_devices if groups.kind == "all" else groups.group_size


def _by_partition(body: Computation, instr: Instruction) -> bool:
    """Does any start index of a dynamic-slice come from the device's partition (or replica)
    id, inside ``body``?"""
    seen, todo = set(), list(instr.operand_names[1:])
    while todo:
        name = todo.pop()
        op = body.by_name.get(name)
        if op is None or name in seen:
            continue
        if op.opcode in _IDS:
            return True
        seen.add(name)
        todo.extend(op.operand_names)
    return False


def _slices(body: Computation, reduce: Instruction) -> list[Instruction] | None:
    """The dynamic-slices the all-reduce's results reach through views alone; None where the
    body returns a result or any other instruction uses one (the sum is kept whole)."""
    users: dict[str, list[tuple[Instruction, int]]] = {}
    for i in body.instructions:
        for k, name in enumerate(i.operand_names):
            users.setdefault(name, []).append((i, k))
    out, todo = [], [reduce.name]
    while todo:
        name = todo.pop()
        if body.by_name[name] is body.root:
            return None  # the fusion returns the sum itself
        for user, k in users.get(name, ()):
            if user.opcode in _VIEWS:
                todo.append(user.name)
            elif user.opcode == "dynamic-slice" and k == 0:
                out.append(user)
            else:
                return None
    return sorted(out, key=body.instructions.index)  # in the body's order, as its results


def _scatter_results(module: Module, fusion: Instruction) -> tuple[Shape, ...] | None:
    reduce = collective(module, fusion)
    if reduce is None or reduce.opcode != "all-reduce" or \
            chain_role(module, fusion) in ("continue", "done"):
        return None
    n, body = _group_size(reduce, module), module.computation(reduce.computation)
    slices = _slices(body, reduce) or []
    # each result of the all-reduce sliced once, to 1/n of it, at an offset by partition id
    if n < 2 or len(slices) != len(reduce.shapes) or not all(
            len(s.shapes) == 1 and s.operand_leaves
            and s.shapes[0].elements * n == s.operand_leaves[0].elements
            and _by_partition(body, s) for s in slices):
        return None
    return tuple(s.shapes[0] for s in slices)


def all_reduce_scatter(module: Module, fusion: Instruction) -> tuple[Shape, ...] | None:
    """Each device's results of the reduce-scatter an all-reduce-scatter fusion runs (module
    docstring): its all-reduce's every result sliced to 1/n (n: the group size) by an offset
    from the partition id. None for any other instruction (an all-reduce whose sum the fusion
    returns whole, a slice of it by a fixed offset, a chain's continuation or done)."""
    key = (fusion.computation, fusion.name)
    cache = module.derived.scatters
    if key not in cache:
        cache[key] = _scatter_results(module, fusion)
    return cache[key]
