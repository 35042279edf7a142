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

from collections.abc import Sequence

from harness.explain.site import MAX_HOPS, PASS, dot_in, forward_users
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.signature import Parameter, parameters, user_name
from harness.hlo.walk import async_done

BACKWARD = "transpose("  # in the op_name of every op JAX's autodiff made for the backward pass
_GATHERS = frozenset({"all-gather", "all-gather-start", "all-gather-done"})


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


_MOVES = frozenset({"bitcast", "copy", "convert", "reshape", "transpose", "copy-start",
                    "copy-done"}) | _GATHERS


def _direct_parameter(name: str, comp: Computation) -> Instruction | None:
    """The entry parameter ``name``'s value is, through ops that only move it (gathers too)."""
    instr = comp.by_name.get(name)
    for _ in range(MAX_HOPS):
        if instr is None or instr.opcode == "parameter":
            break
        instr = comp.by_name.get(instr.operand_names[0]) if instr.opcode in _MOVES and \
            instr.operand_names else None
    return instr if instr is not None and instr.opcode == "parameter" and comp.is_entry \
        else None


def _forward_side(value: Instruction, comp: Computation, module: Module,
                  hops: int = MAX_HOPS) -> str:
    """"lhs" or "rhs": the side of the first forward matmul (no ``transpose(``) that reads
    ``value`` through ops that only move it; "" where none does."""
    from harness.explain.site import DOTS, _into_fusion

    for user in forward_users(module, comp, value.name) if hops > 0 else ():
        if BACKWARD in user.op_name:
            continue
        if dot_in(user, module) is not None:
            if user.opcode in DOTS:
                return "lhs" if user.operand_names[0] == value.name else "rhs"
            found = _into_fusion(user, user.operand_names.index(value.name), None, module)
            if found is not None and found.dot is not None:
                return found.side
        elif user.opcode in _MOVES:
            side = _forward_side(user, comp, module, hops - 1)
            if side:
                return side
    return ""


def input_gradient(grad: Instruction, comp: Computation, module: Module) -> bool:
    """``grad`` (a backward dot or a fusion holding one) is dX = G . W^T, the gradient of a
    forward matmul's input: one of its operands is an entry parameter the forward pass
    multiplies as its weight (x @ W's rhs). Its sum is an activation's, no weight's."""
    if dot_in(grad, module) is None:
        return False
    for a in grad.operand_names:
        param = _direct_parameter(a, comp)
        if param is not None and _forward_side(param, comp, module) == "rhs":
            return True
    return False


def _read_forward(param: Instruction, comp: Computation, module: Module, skip: str) -> bool:
    """The forward pass reads the parameter (a weight, not an optimizer state): some user of
    it other than ``skip`` carries no ``transpose(`` in its name."""
    return any(u.name != skip and BACKWARD not in u.op_name
               for u in forward_users(module, comp, param.name))


def _updated(instr: Instruction, k: int, comp: Computation, module: Module,
             hops: int = 3) -> int | None:
    """The index of the entry parameter the step updates with result ``k`` of the reduction
    (an optimizer's p - lr·g: an op that combines the summed gradient, or its slice, with a
    parameter the forward pass reads); None where none does."""
    leaf = async_done(module, instr) if instr.opcode.endswith("-start") else instr
    if leaf is not None and len(instr.shapes) > 1:
        leaf = next((u for u in forward_users(module, comp, leaf.name)
                     if u.opcode == "get-tuple-element" and u.attrs.get("index") == k), None)
    todo = [leaf] if leaf is not None else []
    for _ in range(hops):
        nxt = []
        for user in (u for v in todo for u in forward_users(module, comp, v.name)):
            for a in user.operand_names:
                param = _direct_parameter(a, comp)
                if param is not None and _read_forward(param, comp, module, user.name):
                    return int(param.literal.strip())
            if user.opcode in PASS - {"get-tuple-element"}:
                nxt.append(user)
        todo = nxt
    return None


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
        if input_gradient(src, comp, module):
            continue  # dX = G . W^T: an activation's gradient (tensor parallelism's)
        # the parameter the step updates with it, else the dataflow's weight where the
        # gradient has its shape (dX = G . W^T has x's), else one of its shape
        updated = _updated(instr, k, comp, module)
        hit = next((p for p in free if p[2].index == updated), None)
        weight = _weight(src, comp, module, names)
        hit = hit or (_by_shape([p for p in free if p[1] == weight], dims) if weight else None)
        hit = hit or _by_shape(free, dims)
        if hit is not None:
            free.remove(hit)
            found.append(hit[1])
    return tuple(found)
