"""The weights whose gradients a reduction sums, named as the user's code names them.

A reduction is a weight gradient's (book §6.1: data parallelism sums each weight's gradient over
the batch shards) where it sums a backward-pass value (JAX names those ops
``transpose(jvp(...))``). Which weight, read from the dataflow first: the gradient dW = A^T . G
of a forward matmul A . W is a backward dot that reads the forward dot's other operand A; so
the weight is the entry parameter that forward dot reads beside A (through all-gathers and ops
that pass data on: an FSDP weight is gathered first). Where the dataflow does not say, a
parameter of the operand's shape on this device, or of the whole array's (an FSDP gradient
summed whole, then sliced), one of the very shape first, then one transposed. XLA combines the
gradient all-reduces of a step into one, so every operand counts.

Names: each entry parameter's metadata name (``params['w1']``) unescaped; where JAX recorded
only its placeholder ``Arg_<k>.<n>`` (a program whose arguments hold ``jax.Ref``s records no
argument names), the pytree path the capture gives parameter ``k`` (``names``).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from harness.explain.site import MAX_HOPS, PASS, dot_in, forward_users
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.signature import Parameter, parameters

BACKWARD = "transpose("  # in the op_name of every op JAX's autodiff made for the backward pass
_PLACEHOLDER = re.compile(r"^Arg_(\d+)\.\d+$")  # JAX's name for an argument it could not name
_ESCAPED = re.compile(r"\\(.)")
_GATHERS = frozenset({"all-gather", "all-gather-start", "all-gather-done"})


def user_name(index: int, recorded: str, names: Sequence[str] | None = None) -> str:
    """Entry parameter ``index``'s name in the user's code: its metadata name (``recorded``,
    unescaped), or for JAX's placeholder ``Arg_k.n`` the capture's path of argument ``k``
    (``names``); ``parameter <index>`` where neither says."""
    recorded = _ESCAPED.sub(r"\1", recorded)
    m = _PLACEHOLDER.match(recorded)
    if names and (m or not recorded):
        k = int(m.group(1)) if m else index
        if 0 <= k < len(names) and names[k]:
            return names[k]
    return recorded or f"parameter {index}"


def parameter_of(instr: Instruction, comp: Computation, names: Sequence[str] | None = None,
                 hops: int = MAX_HOPS) -> str:
    """The user's name of the entry parameter ``instr``'s data comes from, through ops that
    pass it on and all-gathers ("" where it is computed)."""
    while hops > 0 and instr.opcode != "parameter" and instr.operand_names:
        src = comp.by_name.get(instr.operand_names[0])
        if src is None or src.opcode not in PASS | _GATHERS | {"parameter"}:
            return ""
        instr, hops = src, hops - 1
    if instr.opcode != "parameter" or not comp.is_entry:
        return ""
    return user_name(int(instr.literal.strip() or -1), instr.op_name, names)


def _backward_value(instr: Instruction, comp: Computation, hops: int = MAX_HOPS) -> bool:
    """Whether ``instr``'s value comes from the backward pass: it, or an op it only passes on,
    is named ``transpose(...)`` (an op XLA made without metadata is looked through)."""
    while hops > 0:
        if BACKWARD in instr.op_name:
            return True
        src = comp.by_name.get(instr.operand_names[0]) if instr.operand_names else None
        if src is None or instr.opcode not in PASS:
            return False
        instr, hops = src, hops - 1
    return False


def _weight(grad: Instruction, comp: Computation, module: Module,
            names: Sequence[str] | None) -> str:
    """The weight W of dW = A^T . G (``grad``: a backward dot or a fusion holding one): the
    entry parameter a forward dot reads beside one of ``grad``'s operands ("" if none)."""
    if dot_in(grad, module) is None:
        return ""
    for a in grad.operand_names:
        for fwd in forward_users(module, comp, a):
            if fwd is grad or BACKWARD in fwd.op_name or dot_in(fwd, module) is None:
                continue
            for other in fwd.operand_names:
                src = comp.by_name.get(other)
                found = parameter_of(src, comp, names) if other != a and src else ""
                if found:
                    return found
    return ""


def _by_shape(free: list[tuple[tuple, str, Parameter]], dims: set[tuple]) -> tuple | None:
    """A parameter of one of ``dims`` on this device, else of the whole array's shape, each
    first as it is, then transposed."""
    for shape_of in (lambda p: p[0], lambda p: p[2].global_dims):
        hit = (next((p for p in free if tuple(shape_of(p)) in dims), None)
               or next((p for p in free if sorted(shape_of(p)) in map(sorted, dims)), None))
        if hit is not None:
            return hit
    return None


def gradients(instr: Instruction, module: Module, names: Sequence[str] | None = None
              ) -> tuple[str, ...]:
    """The entry parameters whose gradients a reduction sums (see the module's docstring),
    each once; () for none. Scalars are left out (a loss is one too)."""
    free = [(p.dims, user_name(p.index, p.name, names), p) for p in parameters(module)
            if p.dims]
    comp = module.computation(instr.computation)
    found = []
    for k, name in enumerate(instr.operand_names):
        src = comp.by_name.get(name)
        if src is None or len(src.shapes) != 1 or not src.shapes[0].dims or \
                not _backward_value(src, comp):
            continue
        dims = {tuple(src.shapes[0].dims)} | ({tuple(instr.shapes[k].dims)}
                                              if k < len(instr.shapes) else set())
        weight = _weight(src, comp, module, names)
        # the dataflow's weight where the gradient has its shape (dX = G . W^T has x's)
        hit = _by_shape([p for p in free if p[1] == weight], dims) if weight else None
        hit = hit or _by_shape(free, dims)
        if hit is not None:
            free.remove(hit)
            found.append(hit[1])
    return tuple(found)
