"""Megatron's tensor-parallel pair read from the compiled program's dataflow (book §6.1:
W_in[D, F_Y] then W_out[F_Y, D], one all-reduce a pair, forward and back): an all-reduce whose
matmul's activation comes sharded from the matmul before it, by a weight the program takes as
the user laid it out (an entry parameter, gathered at most), through elementwise work
alone. Its fix is not "shard the weight's non-contracting dimension": the code does already.
"""
from __future__ import annotations

from harness.explain.site import MAX_HOPS, dot_in
from harness.hlo.ir import Computation, Instruction, Module

_ELEMENTWISE = frozenset({"add", "multiply", "maximum", "minimum", "select", "convert",
                          "bitcast", "copy", "reshape", "transpose", "broadcast", "tanh",
                          "negate", "subtract", "divide", "exponential", "logistic",
                          "compare", "and", "or", "not", "abs", "sign", "sqrt", "rsqrt",
                          "log", "power", "clamp"})


def _laid_out(name: str, comp: Computation, hops: int = MAX_HOPS) -> bool:
    """``name``'s value is an entry parameter through copies, bitcasts and gathers alone."""
    instr = comp.by_name.get(name)
    while instr is not None and hops > 0 and instr.opcode in _MOVES and instr.operand_names:
        instr, hops = comp.by_name.get(instr.operand_names[0]), hops - 1
    return instr is not None and instr.opcode == "parameter" and comp.is_entry


# ops that hand a weight on as the user laid it out: copies, and an FSDP gather over another
# axis (an all-to-all that moves its sharding is XLA's choice, not the user's layout)
_MOVES = frozenset({"bitcast", "copy", "convert", "transpose", "copy-start", "copy-done",
                    "all-gather", "all-gather-start", "all-gather-done"})


def _rhs_operand(instr: Instruction, module: Module) -> str:
    """The name of the operand a dot (alone or in its fusion) reads as its rhs ("" unknown)."""
    dot = dot_in(instr, module)
    if dot is instr:
        return instr.operand_names[1] if len(instr.operand_names) > 1 else ""
    body = module.computation(dot.computation)
    inner = body.by_name.get(dot.operand_names[1]) if len(dot.operand_names) > 1 else None
    while inner is not None and inner.opcode in _MOVES and inner.operand_names:
        inner = body.by_name.get(inner.operand_names[0])
    if inner is None or inner.opcode != "parameter" or not inner.literal.strip().isdigit():
        return ""
    k = int(inner.literal.strip())
    return instr.operand_names[k] if k < len(instr.operand_names) else ""


def _matmul_made(name: str, comp: Computation, module: Module, hops: int = MAX_HOPS) -> bool:
    """``name``'s value is the result of a matmul by a weight the program takes as it is
    (an entry parameter, no collective between), through elementwise work alone (a bias, an
    activation; a fusion of such ops), never through a collective or a slice."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if dot_in(instr, module) is not None:  # its weight (x @ W's rhs) as the user laid it out
        rhs = _rhs_operand(instr, module)
        return bool(rhs) and _laid_out(rhs, comp)
    if instr.opcode == "fusion":
        body = module.computation(instr.called("calls")[0]).instructions
        if any(i.opcode not in _ELEMENTWISE | {"parameter", "constant"} for i in body):
            return False
    elif instr.opcode not in _ELEMENTWISE:
        return False
    return any(_matmul_made(n, comp, module, hops - 1) for n in instr.operand_names)


def megatron(instr: Instruction, module: Module) -> bool:
    """The all-reduce ``instr`` sums a matmul whose activation operand is itself a matmul's
    result, kept sharded through elementwise work: the row-parallel half of Megatron's pair
    (book §6.1: W_in[D, F_Y] then W_out[F_Y, D], one all-reduce a pair), forward or back."""
    if instr.opcode.removesuffix("-start") != "all-reduce" or len(instr.operand_names) != 1:
        return False
    comp = module.computation(instr.computation)
    producer = comp.by_name.get(instr.operand_names[0])
    if producer is None or dot_in(producer, module) is None:
        return False
    return any(_matmul_made(n, comp, module) for n in producer.operand_names)
