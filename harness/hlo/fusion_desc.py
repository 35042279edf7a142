"""A fusion's HBM traffic as the operands it reads and the results it writes
(``harness.hlo.desc``'s ``fusion`` and ``fusion-start``): each operand once, less the part its
outputs never need (a slice of it, through views, row-wise ops and nested fusions), and a
parameter updated in place neither read nor written.
"""
from __future__ import annotations

from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import async_done
from predictions.rules import ELEMENTWISE, OpDesc, Shape

_SLICING = frozenset({"slice", "dynamic-slice", "gather"})
_VIEWS = frozenset({"bitcast", "reshape"})  # a new shape over the same bytes, no copy


def _users(module: Module, comp_name: str) -> dict[str, list[Instruction]]:
    by_comp = module.derived.users
    if comp_name not in by_comp:
        users: dict[str, list[Instruction]] = {}
        for i in module.computation(comp_name).instructions:
            for name in i.operand_names:
                users.setdefault(name, []).append(i)
        by_comp[comp_name] = users
    return by_comp[comp_name]


def _readers(users: dict, instr: Instruction) -> list[Instruction]:
    """The users of ``instr``, looking through bitcasts/reshapes that only re-label it."""
    out = []
    for u in users.get(instr.name, []):
        out.extend(_readers(users, u) if u.opcode in _VIEWS else [u])
    return out


def _behind_views(body: Computation, name: str) -> Instruction:
    """The instruction behind a chain of bitcasts/reshapes."""
    instr = body.by_name[name]
    while instr.opcode in _VIEWS and instr.operand_names:
        instr = body.by_name[instr.operand_names[0]]
    return instr


_IN_PLACE = {"dynamic-update-slice": 1, "scatter": 2}  # opcode -> operand index of the update
# Ops whose every output element needs its own input elements (so a used fraction of the
# output needs the same fraction of the input): elementwise, views, transposes, reductions.
_ROWWISE = frozenset(ELEMENTWISE) | {"copy", "transpose", "reverse", "reduce", *_VIEWS}


def _update_in_place(body: Computation, users: dict, out: Instruction) -> Instruction | None:
    """The parameter a fusion output updates in place: ``out`` is a dynamic-update-slice (or a
    single-operand scatter) of a parameter (through bitcasts) that nothing else in the fusion
    reads, so XLA aliases the buffer with the result and only the update moves."""
    k = _IN_PLACE.get(out.opcode)
    if k is None or len(out.operand_names) <= k or (out.opcode == "scatter"
                                                    and len(out.operand_names) != 3):
        return None
    target = _behind_views(body, out.operand_names[0])
    if target.opcode == "parameter" and _readers(users, target) == [out]:
        return target
    return None


def _elements(instr: Instruction) -> int:
    return sum(s.elements for s in instr.shapes)


def _used_fraction(body: Computation, users: dict, module: Module) -> dict[str, float]:
    """Per instruction, the fraction of its elements the fusion's outputs need (XLA's operand
    utilization): a slice or gather needs only what it picks; row-wise ops pass the fraction
    of their output that is needed on to their input; a fusion nested in this one (libtpu's
    kLoop fusion that slices layer i of a stacked weight inside a matmul's output fusion)
    needs what its own body needs of that operand (``_nested``); any other use needs all."""
    used: dict[str, float] = {}
    for instr in reversed(body.instructions):
        total = 1.0 if instr.is_root else 0.0
        for u in users.get(instr.name, ()):
            f = used.get(u.name, 0.0)
            first = u.operand_names[0] == instr.name
            if u.opcode in _SLICING and first:
                total += f * _elements(u) / max(_elements(instr), 1)
            elif u.opcode in _ROWWISE and (first or u.opcode != "reduce"):
                total += f
            elif u.opcode == "fusion" and f > 0:
                total += _nested(u, instr.name, module) if f >= 1.0 else 1.0
            elif f > 0:
                total += 1.0
        used[instr.name] = min(total, 1.0)
    return used


def _nested(fusion: Instruction, name: str, module: Module) -> float:
    """The fraction of operand ``name`` a nested ``fusion`` needs for its whole output: the
    most its body needs of any parameter ``name`` is passed as."""
    inner = module.computation(fusion.called("calls")[0])
    used = _used_fraction(inner, _users(module, inner.name), module)
    params = {int(p.literal): p.name for p in inner.instructions if p.opcode == "parameter"}
    return max((used.get(params.get(k, ""), 1.0) for k, n in enumerate(fusion.operand_names)
                if n == name), default=1.0)


def fusion_desc(instr: Instruction, module: Module) -> OpDesc:
    """A fusion's HBM traffic as operands/results (its FLOPs come from the inner ops): each
    operand once, except

    - the part of a parameter the outputs never need: a scan reading layer i of stacked
      weights reads that layer, a gather of one logit per row reads those logits
      (``_used_fraction``, through bitcasts, converts and other row-wise ops);
    - a parameter that a root dynamic-update-slice or scatter (or one in a root tuple)
      updates in place (a scan writing row i of its stacked output, a KV-cache write): neither
      read nor written, and that output is the update (a scatter also reads the old values).

    This is the one place that knows about in-place updates and slices (``rules.fusion_cost``
    prices the operands and results it is given). A ``fusion-start`` (an async fusion) is the
    same fusion; its result is what the ``fusion-done`` returns."""
    body = module.computation(instr.called("calls")[0])
    users = _users(module, body.name)
    params = {int(p.literal): p for p in body.instructions if p.opcode == "parameter"}
    outs = ([body.by_name[n] for n in body.root.operand_names] if body.root.opcode == "tuple"
            else [body.root])
    leaves = _fusion_results(instr, module)
    results: list[Shape] = []
    operands: list[Shape] = []
    in_place: set[str] = set()
    for k, out in enumerate(outs):
        target = _update_in_place(body, users, out)
        if target is not None:
            in_place.add(target.name)
            update = body.by_name[out.operand_names[_IN_PLACE[out.opcode]]].shapes
            results.extend(update)
            if out.opcode == "scatter":  # scatter-add reads the values it updates
                operands.extend(update)
        elif k < len(leaves):
            results.append(leaves[k])
    if len(outs) == 1 and not in_place:
        results = list(leaves)
    used = _used_fraction(body, users, module)
    for k, op_leaves in enumerate(instr.operand_shapes):
        p = params.get(k)
        if p is not None and p.name in in_place:
            continue  # updated in place: the untouched rest is neither read nor written
        fraction = used.get(p.name, 1.0) if p is not None else 1.0
        readers = _readers(users, p) if p is not None else []
        slices = [s for u in readers for s in u.shapes]
        if readers and all(u.opcode in _SLICING and _behind_views(body, u.operand_names[0]) is p
                           for u in readers) and \
                sum(s.elements for s in slices) <= fraction * p.shapes[0].elements:
            operands.extend(slices)  # exactly the slices it reads
        elif fraction < 1.0:
            operands.extend(Shape(s.dtype, (round(fraction * s.elements),)) for s in op_leaves)
        else:
            operands.extend(op_leaves)
    return OpDesc("fusion", tuple(results), tuple(operands))


def _fusion_results(instr: Instruction, module: Module) -> tuple[Shape, ...]:
    if instr.opcode == "fusion-start":  # ((operands), result, context) until the -done
        done = async_done(module, instr)
        return tuple(done.shapes) if done is not None else tuple(instr.shapes[-2:-1])
    return tuple(instr.shapes)
