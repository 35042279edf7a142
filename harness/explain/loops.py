"""What a while loop does with a value: carries it into its next iteration, takes it into a loop
it starts, or carries it unchanged; and the all-gathers that gather such a value again in every
iteration (book §6.2: ZeRO-3 inside a microbatch loop gathers each weight once per microbatch,
pipelining's "poor interaction with ZeRO-3").

``regathered``: an all-gather whose operand a while loop carries unchanged (read whole, or a
slice of it: a layer of stacked weights) gathers the same bytes again each iteration of that
loop; a loop that gathers a different slice each iteration (a layer scan) does not repeat
them, the loop around it that runs the scan again does. XLA hoists a plain loop-invariant
gather out of its loop; the one in a layer scan run per microbatch stays.
"""
from __future__ import annotations

from harness.explain import gradients
from harness.explain.site import MAX_HOPS, forward_users
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import trip_count


def loop_of(module: Module, comp: Computation) -> Instruction | None:
    """The while instruction whose body ``comp`` is (None for any other computation)."""
    for other in module.computations.values():
        for instr in other.instructions:
            if instr.opcode == "while" and comp.name in instr.called("body"):
                return instr
    return None


def carried(module: Module, comp: Computation, user: Instruction, name: str
             ) -> list[Instruction]:
    """Where a while body's root tuple ``user`` carries the value ``name`` into the next
    iteration: the body's get-tuple-elements of that index ([] where ``user`` is no such
    root)."""
    if user is not comp.root or user.opcode != "tuple" or loop_of(module, comp) is None:
        return []
    slots = {k for k, n in enumerate(user.operand_names) if n == name}
    return [i for i in comp.instructions if i.opcode == "get-tuple-element"
            and i.attrs.get("index") in slots and i.operand_names
            and comp.by_name.get(i.operand_names[0]) is not None
            and comp.by_name[i.operand_names[0]].opcode == "parameter"]


def into_loop(module: Module, comp: Computation, user: Instruction, name: str
               ) -> list[tuple[Instruction, Computation]]:
    """Where a tuple ``user`` passes the value ``name`` into a while loop it starts: the loop
    body's get-tuple-elements of that index, each with the body."""
    slots = {k for k, n in enumerate(user.operand_names) if n == name}
    out = []
    for loop in forward_users(module, comp, user.name) if user.opcode == "tuple" else ():
        for body in loop.called("body") if loop.opcode == "while" else ():
            inner = module.computation(body)
            out += [(i, inner) for i in inner.instructions if i.opcode == "get-tuple-element"
                    and i.attrs.get("index") in slots and i.operand_names
                    and inner.by_name[i.operand_names[0]].opcode == "parameter"]
    return out


_MOVES = frozenset({"bitcast", "copy", "convert", "reshape", "transpose"})
_SLICES = frozenset({"dynamic-slice", "slice"})


def _read_of(instr: Instruction, module: Module) -> tuple[str, bool] | None:
    """(the operand ``instr`` only moves or slices, whether it slices it); None for any
    other op. A fusion is read so when its body only converts, moves and slices (a layer of
    stacked weights taken and converted)."""
    if not instr.operand_names:
        return None
    if instr.opcode in _MOVES | _SLICES:
        return instr.operand_names[0], instr.opcode in _SLICES
    if instr.opcode != "fusion":
        return None
    body = module.computation(instr.called("calls")[0]).instructions
    kinds = {i.opcode for i in body} - {"parameter", "constant"}
    if not kinds or not kinds <= _MOVES | _SLICES | {"broadcast", "compare", "select", "add",
                                                      "subtract", "clamp"}:
        return None  # index arithmetic beside the slice is allowed, nothing that computes data
    if any(i.opcode not in ("parameter", "constant") and any(s.elements > 1 for s in i.shapes)
           and i.opcode not in _MOVES | _SLICES | {"broadcast"} for i in body):
        return None
    return instr.operand_names[0], bool(kinds & _SLICES)


def _carried_slot(comp: Computation, name: str, module: Module, hops: int = MAX_HOPS
                  ) -> tuple[int, bool] | None:
    """(k, sliced): ``name``'s value is slot k of the while body ``comp``'s parameter, which
    the body carries unchanged into the next iteration, read whole or a slice of it; None
    otherwise."""
    instr, sliced = comp.by_name.get(name), False
    while instr is not None and hops > 0 and instr.opcode != "get-tuple-element":
        read = _read_of(instr, module)
        if read is None:
            return None
        sliced |= read[1]
        instr, hops = comp.by_name.get(read[0]), hops - 1
    root = comp.root
    if instr is None or instr.opcode != "get-tuple-element" or root is None or \
            root.opcode != "tuple":
        return None
    k, param = instr.attrs.get("index"), comp.by_name.get(instr.operand_names[0])
    if param is None or param.opcode != "parameter" or k is None or k >= len(root.operand_names):
        return None
    out = comp.by_name.get(root.operand_names[k])
    while out is not None and out.opcode in ("copy", "bitcast") and out.operand_names:
        out = comp.by_name.get(out.operand_names[0])
    same = out is not None and out.opcode == "get-tuple-element" and \
        out.attrs.get("index") == k and out.operand_names[0] == param.name
    return (k, sliced) if same else None


def _climb(instr: Instruction, module: Module) -> tuple[int, Computation, str]:
    """(times the all-gather ``instr`` gathers the same data again, the computation and the
    value its operand is traced to through the loops that carry it unchanged)."""
    comp, name, times = module.computation(instr.computation), instr.operand_names[0], 1
    for _ in range(8):  # loops nested
        loop = loop_of(module, comp)
        slot = _carried_slot(comp, name, module) if loop is not None else None
        if slot is None:
            break
        if not slot[1]:
            times *= trip_count(module, loop).n
        parent = module.computation(loop.computation)
        init = parent.by_name.get(loop.operand_names[0]) if loop.operand_names else None
        if init is None or init.opcode != "tuple" or slot[0] >= len(init.operand_names):
            break
        comp, name = parent, init.operand_names[slot[0]]
    return times, comp, name


def regathered(instr: Instruction, module: Module) -> int:
    """How many times per execution of its program the all-gather ``instr`` gathers the same
    data again: the trip counts of the while loops that carry its operand unchanged, each loop
    counted where it repeats the same bytes (a loop that gathers a different slice of a
    stacked weight each iteration, a layer scan, is not; the loop around it that runs the
    scan again is: a microbatch loop). 0 where no loop repeats it."""
    if instr.opcode.removesuffix("-start") != "all-gather" or not instr.operand_names:
        return 0
    times = _climb(instr, module)[0]
    return times if times > 1 else 0


def regathered_parameter(instr: Instruction, module: Module, names=None) -> str:
    """The user's name of the entry parameter a regathered all-gather's loops carry ("" where
    it is computed)."""
    _, comp, name = _climb(instr, module)
    value = comp.by_name.get(name)
    return gradients.parameter_of(value, comp, names) if value is not None else ""
