"""What a collective does, read from the compiled program's dataflow rather than from one shape.

- ``ring``: a collective matmul (book.md §4.1; `jax-stuff.md` builds one from ``ppermute``):
  a permute whose chunk is multiplied locally before it is shifted and whose shifted chunk is
  multiplied again on arrival ("gather": the AllGather collective matmul, A[B, D_Y] shifted
  around the Y ring), or a permute that shifts a sum of partial matmuls to be added to the next
  one ("scatter": the ReduceScatter collective matmul). Unrolled (``fori_loop(...,
  unroll=True)``: no while loop in the program) or inside a loop alike.
- ``sliced``: an all-reduce whose every result is cut to this device's slice by its partition
  id (a ``dynamic-slice`` indexed by ``partition-id``): the program asked for the result
  sharded, a reduce-scatter, and the backend lowered it as an all-reduce and a slice (XLA:CPU
  does so; XLA:GPU's and XLA:TPU's reduce-scatter creator turn the pair into one
  reduce-scatter, book §4.2).
"""
from __future__ import annotations

from harness.explain.site import PASS, dot_in, forward_users
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import async_done

MAX_HOPS = 6  # ops followed from the collective before giving up
_SUMS = frozenset({"add", "fusion"})  # where partial products meet (a fusion holding an add)


def _reaches_dot(instr: Instruction, comp: Computation, module: Module, skip: str = "",
                 hops: int = MAX_HOPS) -> bool:
    """Some dot (or a fusion holding one) reads ``instr``'s value, through ops that pass it
    on; ``skip``: a user not followed (the permute itself)."""
    if hops <= 0:
        return False
    for user in forward_users(module, comp, instr.name):
        if user.name == skip:
            continue
        if dot_in(user, module) is not None:
            return True
        if user.opcode in PASS and _reaches_dot(user, comp, module, skip, hops - 1):
            return True
    return False


def _from_dot(name: str, comp: Computation, module: Module, hops: int = MAX_HOPS) -> bool:
    """``name``'s value is a dot's result, or a sum (an add or a fusion) of one."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if dot_in(instr, module) is not None:
        return True
    if instr.opcode in _SUMS | PASS:
        return any(_from_dot(n, comp, module, hops - 1) for n in instr.operand_names)
    return False


def ring(instr: Instruction, module: Module) -> str:
    """"gather" or "scatter" where the permute ``instr`` is a step of a collective matmul's
    ring (see the module's docstring), "" where it is not."""
    if instr.opcode.removesuffix("-start") != "collective-permute" or not instr.operand_names:
        return ""
    comp = module.computation(instr.computation)
    arrived = (async_done(module, instr) if instr.opcode.endswith("-start") else instr) or instr
    source = comp.by_name.get(instr.operand_names[0])
    if source is None:
        return ""
    if _reaches_dot(source, comp, module, skip=instr.name) and \
            _reaches_dot(arrived, comp, module):
        return "gather"  # the chunk is multiplied here and, shifted, on the next device
    summed = [u for u in forward_users(module, comp, arrived.name) if u.opcode in _SUMS]
    if _from_dot(source.name, comp, module) and any(
            _from_dot(n, comp, module) for u in summed for n in u.operand_names
            if n != arrived.name):
        return "scatter"  # a sum of partial matmuls shifted on, to be added to the next
    return ""


def _by_partition(name: str, comp: Computation, module: Module, hops: int = 3) -> bool:
    """``name``'s value is computed from the device's partition id."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if instr.opcode in ("partition-id", "replica-id"):
        return True
    return any(_by_partition(n, comp, module, hops - 1) for n in instr.operand_names)


def _slices_by_partition(user: Instruction, comp: Computation, module: Module,
                         elements: int) -> bool:
    """``user`` cuts this device's slice out of a value of ``elements``: a dynamic-slice, or
    a fusion holding one, indexed by the partition id, whose result is smaller."""
    if sum(s.elements for s in user.shapes) >= elements:
        return False
    if user.opcode == "dynamic-slice":
        return any(_by_partition(n, comp, module) for n in user.operand_names[1:])
    if user.opcode != "fusion":
        return False
    body = module.computation(user.called("calls")[0])
    cut = any(i.opcode == "dynamic-slice" for i in body.instructions)
    return cut and (any(i.opcode == "partition-id" for i in body.instructions) or
                    any(_by_partition(n, comp, module) for n in user.operand_names))


def sliced(instr: Instruction, module: Module) -> bool:
    """Every non-scalar result of the all-reduce ``instr`` is used only through a slice by
    the device's partition id (see the module's docstring)."""
    if instr.opcode.removesuffix("-start") != "all-reduce":
        return False
    comp = module.computation(instr.computation)
    done = (async_done(module, instr) if instr.opcode.endswith("-start") else instr) or instr
    leaves = [done]
    if len(instr.shapes) > 1:  # a tuple: each element through its get-tuple-element
        leaves = [u for u in forward_users(module, comp, done.name)
                  if u.opcode == "get-tuple-element" and u.shapes and u.shapes[0].dims]
    users = [(v, leaf.shapes[0].elements) for leaf in leaves
             for v in forward_users(module, comp, leaf.name)]
    return bool(users) and all(_slices_by_partition(u, comp, module, n) for u, n in users)
