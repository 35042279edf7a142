"""Collectives the TPU compiler wraps in fusions, as libtpu 0.0.42.1 compiles them (checked on
v5e slices, ``tests/test_explain_lowering.py``); an explanation that reads opcodes alone sees
none of them.

- ``all-reduce-scatter``: where a program asks for a sum sharded (an ``out_sharding`` on a
  matmul whose contracting dimension is sharded, an FSDP gradient), XLA:TPU fuses the
  all-reduce and each device's slice of it into one ``kind=kCustom`` fusion (its body: the
  all-reduce, then a ``dynamic-slice`` by the partition id; backend config emitter
  ``SingleInputAllReduceScatterFusion``, a ring): one reduce-scatter (book §4.2), a row of
  its own (``harness.hlo.tpu.all_reduce_scatter`` recognises it, for the cost model too).
  An all-reduce and a slice left apart (libtpu keeps them so for a ``psum_scatter`` of a
  flat array) are read as an all-reduce (``dataflow.sliced``).
- an async collective chain's start (``harness.hlo.tpu.chain_role`` "start"): the collective
  it starts; its continuations and done are the same transfer, never rows of their own.

``REGISTRY`` maps what a fusion is (``_shape_of``) to how its kind is read; ``SLICED`` is the
sentence for a reduce-scatter a backend lowered apart: an all-reduce and a slice ("slice"), or
an all-reduce of a block each device picks and a permute to its owner ("block",
``dataflow.sliced``).
"""
from __future__ import annotations

from collections.abc import Callable

from harness.hlo import tpu
from harness.hlo.ir import Instruction, Module
from predictions.rules import COLLECTIVE_OPCODES

# the backend lowered a reduce-scatter the program asked for as an all-reduce and a slice.
# Checked ahead of time with libtpu 0.0.42.1 on v5e slices (tests/test_explain_lowering.py):
# XLA:TPU fuses the pair of a matmul's out_sharding or an FSDP gradient into one
# all-reduce-scatter fusion (below) on a 4x2 mesh, but on a 2x4 mesh of the same slice has
# each device sum only a block it picks by its partition id, then permute it to its owner
# ("block"), and leaves a psum_scatter of a flat array as the pair; XLA:CPU always leaves the
# pair. XLA:GPU's ReduceScatterCreator pass is not checked here.
SLICED = {
    "slice": "; the program asks for the result sharded {over} (a reduce-scatter): XLA:CPU "
             "lowers that as this all-reduce and a slice; XLA:TPU fuses the pair into one "
             "all-reduce-scatter op (a ring reduce-scatter, half the bytes, book §4.2) where a "
             "matmul or a gradient feeds it",
    "block": "; the program asks for the result sharded {over} (a reduce-scatter): XLA:TPU "
             "lowered it so: each device multiplies only the block of the result its partition "
             "id picks (devices on the other mesh axes share the matmul), all-reduces that "
             "block {over}, and a collective-permute hands each block to the device that keeps "
             "it",
}


def _plain(fusion: Instruction, inner: Instruction, module: Module) -> str:
    if tpu.all_reduce_scatter(module, fusion) is not None:
        return "reduce-scatter"  # each device keeps its slice of the sum (harness.hlo.tpu)
    return COLLECTIVE_OPCODES.get(inner.opcode, "")


# what a fusion is -> (the collective's kind from the fusion and its inner collective)
REGISTRY: dict[str, Callable[[Instruction, Instruction, Module], str]] = {
    "collective fusion": _plain,                                  # all-reduce-scatter, ...
    "chain start": lambda f, inner, module: COLLECTIVE_OPCODES.get(inner.opcode, ""),
}


def _shape_of(fusion: Instruction, module: Module) -> str:
    """"chain start", "collective fusion" or "" (a chain's continuation or done, or no
    collective fusion)."""
    role = tpu.chain_role(module, fusion)
    if role == "start":
        return "chain start"
    return "collective fusion" if role is None else ""


def fused(instr: Instruction, module: Module) -> tuple[str, Instruction] | None:
    """(the collective's kind, the collective inside) of a TPU collective fusion (module
    docstring); None for any other instruction."""
    if instr.opcode != "fusion":
        return None
    shape = _shape_of(instr, module)
    inner = tpu.collective(module, instr) if shape else None
    if inner is None:
        return None
    kind = REGISTRY[shape](instr, inner, module)
    return (kind, inner) if kind else None


def note(instr: Instruction, module: Module) -> str:
    """What the sentence adds for a fused collective ("" for any other)."""
    found = fused(instr, module)
    if found is None or found[0] != "reduce-scatter" or found[1].opcode != "all-reduce":
        return ""
    return ("; XLA:TPU runs it as one all-reduce-scatter fusion: the all-reduce and each "
            "device's slice of it fused into one op, a ring reduce-scatter")


def done(instr: Instruction, module: Module) -> Instruction | None:
    """The done fusion of the async collective chain ``instr`` starts (None for any other)."""
    if instr.opcode != "fusion" or tpu.chain_role(module, instr) != "start":
        return None
    name = tpu.chain_pairs(module, instr.computation).get(instr.name)
    return module.computation(instr.computation).by_name.get(name) if name else None


def collective_op(instr: Instruction, module: Module) -> Instruction:
    """The instruction that names the collective's groups and operands: the collective a
    fusion wraps, else ``instr`` itself."""
    found = fused(instr, module)
    return found[1] if found is not None else instr
