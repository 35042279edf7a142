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
"""
from __future__ import annotations

import re

from harness.hlo.ir import Instruction, Module

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
