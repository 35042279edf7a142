"""Where a collective sits in the program: the matmul it feeds or is fed by (`sharding.md`).

The book's four cases (book.md §4.1) say why a sharded matmul needs communication: an
all-reduce or reduce-scatter of a dot's *output* sums partial products over a contracting
dimension sharded on the collective's axes (case 3); an all-gather of a dot's *operand* undoes
a sharding the local multiply cannot use, on its contracting dimension (case 2) or on a
non-contracting one that the other operand shares (case 4). ``locate`` follows the
collective's data through ops that only move or relabel it (copies, converts, transposes,
bitcasts, async halves, fusions of those) to the first dot, convolution or fusion holding one,
and says which side of it the collective is on and which dimension it gathered.

An op that combines the gathered value with other data (a bias added to a matmul's result)
is its consumer, not a door to the next dot: the walk passes an add, multiply or select only
where its other operands are constants or broadcasts of them (a scale), and otherwise stops
there and names it (``Site.consumer``). Which weights a reduction's gradients are:
``harness.explain.gradients``.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import async_done

DOTS = frozenset({"dot", "convolution"})
# ops that move or relabel data without combining elements across it
PASS = frozenset({"bitcast", "reshape", "copy", "convert", "transpose", "get-tuple-element",
                  "copy-start", "copy-done", "optimization-barrier", "fusion", "negate",
                  "multiply", "add", "select", "broadcast", "dynamic-slice", "slice",
                  "all-gather-done", "collective-permute-done", "all-reduce-done"})
# of those, the ops that combine their operands: passed only when the others are scales
COMBINE = frozenset({"add", "multiply", "select", "subtract", "divide", "maximum", "minimum"})
SCALE_FROM = frozenset({"broadcast", "convert", "reshape", "bitcast", "copy"})
MAX_HOPS = 6  # ops followed from the collective before giving up
BACKWARD = "transpose("  # in the op_name of every op JAX's autodiff made for the backward pass


@dataclass(frozen=True)
class Site:
    """A collective's place relative to a matmul. ``dot``: the dot or convolution (inside its
    fusion where fused), None when none is near; ``side``: "output" (the collective reads the
    dot's result), "lhs" or "rhs" (it feeds that operand); ``dim``: for a gathered operand,
    "contracting", "batch" or "non-contracting" ("" when the gathered dim was lost on the way);
    ``consumer``: where no dot is reached, the op that combines the value with other data
    ("%fusion.2 (add)"), "" where none;
    ``parameter``: the entry parameter the gathered data comes from (its name in the user's
    code, e.g. "w", ``gradients.parameter_of``), "" when it is computed; ``dot_op_name``: the
    dot's metadata op_name."""

    dot: Instruction | None = None
    side: str = ""
    dim: str = ""
    parameter: str = ""
    dot_op_name: str = ""
    consumer: str = ""  # where no dot: the op that combines the value with other data


def _users(module: Module, comp: Computation) -> dict[str, list[Instruction]]:
    """Value name -> the instructions of ``comp`` that read it (cached per computation)."""
    users = module.derived.users.get(comp.name)
    if users is None:
        users = {}
        for i in comp.instructions:
            for name in i.operand_names:
                users.setdefault(name, []).append(i)
        module.derived.users[comp.name] = users
    return users


def forward_users(module: Module, comp: Computation, name: str) -> list[Instruction]:
    """The instructions of ``comp`` that read the value ``name``."""
    return _users(module, comp).get(name, [])


def dot_in(instr: Instruction, module: Module) -> Instruction | None:
    """The dot or convolution ``instr`` is, or the first one in the fusion it calls."""
    if instr.opcode in DOTS:
        return instr
    for callee in instr.called("calls"):
        for inner in module.computation(callee).instructions:
            found = dot_in(inner, module)
            if found is not None:
                return found
    return None


def _dims_of(instr: Instruction) -> tuple[int, ...] | None:
    return instr.shapes[0].dims if len(instr.shapes) == 1 else None


def _carry(dim: int | None, src: Instruction, dst: Instruction) -> int | None:
    """The gathered dimension's index in ``dst``, a user of ``src`` that passes it on."""
    if dim is None:
        return None
    if dst.opcode == "transpose":
        perm = dst.attrs.get("dimensions", ())
        return perm.index(dim) if dim in perm else None
    return dim if _dims_of(dst) == _dims_of(src) else None


def _dim_role(dot: Instruction, side: str, dim: int | None) -> str:
    """"contracting", "batch" or "non-contracting" for dimension ``dim`` of the dot's
    ``side`` operand (a convolution's labels: ``f`` and ``i`` are the contracted features)."""
    if dim is None:
        return ""
    labels = dot.attrs.get("dim_labels")
    if dot.opcode == "convolution" and labels is not None:
        text = labels[0] if side == "lhs" else labels[1]
        if dim >= len(text):
            return ""
        return {"f": "contracting", "i": "contracting", "b": "batch" if side == "rhs"
                else "non-contracting"}.get(text[dim], "non-contracting")
    prefix = "lhs" if side == "lhs" else "rhs"
    if dim in dot.attrs.get(f"{prefix}_contracting_dims", ()):
        return "contracting"
    if dim in dot.attrs.get(f"{prefix}_batch_dims", ()):
        return "batch"
    return "non-contracting"


def _scale(name: str, comp: Computation, hops: int = 4) -> bool:
    """``name``'s value is a scale, not data: a constant, an iota or a scalar, through
    broadcasts and converts."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if instr.opcode in ("constant", "iota") or (len(instr.shapes) == 1
                                                and not instr.shapes[0].dims):
        return True
    return instr.opcode in SCALE_FROM and bool(instr.operand_names) and \
        _scale(instr.operand_names[0], comp, hops - 1)


def _combined(user: Instruction, name: str, comp: Computation) -> bool:
    """``user`` combines the value ``name`` with other data (an add of a matmul's result)."""
    return user.opcode in COMBINE and any(
        n != name and not _scale(n, comp) for n in user.operand_names)


def _inside(fusion: Instruction, k: int, module: Module) -> str:
    """The op inside a fusion (no dot in it) that combines its operand ``k`` with other data
    ("" where the fusion only passes it on)."""
    body = module.computation(fusion.called("calls")[0])
    seen = [i for i in body.instructions if i.opcode == "parameter"
            and i.literal.strip() == str(k)]
    for instr in seen:  # grows as the walk goes
        for user in _users(module, body).get(instr.name, []):
            if _combined(user, instr.name, body):
                return user.opcode
            if user not in seen:
                seen.append(user)
    return ""


def _into_fusion(fusion: Instruction, k: int, dim: int | None, module: Module) -> Site | None:
    """Follow operand ``k`` of a fusion inside it to the dot it feeds."""
    body = module.computation(fusion.called("calls")[0])
    param = next((i for i in body.instructions
                  if i.opcode == "parameter" and i.literal.strip() == str(k)), None)
    return _forward(param, dim, body, module, MAX_HOPS) if param is not None else None


def _forward(instr: Instruction, dim: int | None, comp: Computation, module: Module,
             hops: int) -> Site | None:
    """The first dot ``instr``'s data reaches, through ops that pass it on; where it reaches
    none, the first op that combines it with other data (``Site.consumer``)."""
    if hops <= 0:
        return None
    consumer = None
    for user in _users(module, comp).get(instr.name, []):
        dot = dot_in(user, module)
        if dot is not None and user.opcode in DOTS:
            side = "lhs" if user.operand_names[0] == instr.name else "rhs"
            return Site(dot, side, _dim_role(dot, side, dim), dot_op_name=dot.op_name)
        if dot is not None:  # a fusion holding a dot: follow the operand inside it
            found = _into_fusion(user, user.operand_names.index(instr.name), dim, module)
            if found is not None and found.dot is not None:
                return found
            consumer = consumer or found
            continue
        combines = _combined(user, instr.name, comp) and user.opcode or (
            user.opcode == "fusion" and _inside(user, user.operand_names.index(instr.name),
                                                module))
        if combines:
            consumer = consumer or Site(consumer=f"%{user.name} ({combines})")
            continue
        if user.opcode in PASS:
            nxt = user
            if user.opcode.endswith("-start"):
                nxt = async_done(module, user) or user
            found = _forward(nxt, _carry(dim, instr, user), comp, module, hops - 1)
            if found is not None and found.dot is not None:
                return found
            consumer = consumer or found
    return consumer


def _backward(instr: Instruction, comp: Computation, module: Module, hops: int
              ) -> Instruction | None:
    """The dot whose result reaches ``instr``'s first operand through ops that pass it on."""
    if hops <= 0 or not instr.operand_names:
        return None
    src = comp.by_name.get(instr.operand_names[0])
    if src is None:
        return None
    dot = dot_in(src, module)
    if dot is not None:
        return dot
    if src.opcode == "fusion" and any(i.opcode == "reduce" for i in module.computation(
            src.called("calls")[0]).instructions):
        return None  # it sums a reduction of the dot's result (a loss), not its partial sums
    return _backward(src, comp, module, hops - 1) if src.opcode in PASS else None


def locate(instr: Instruction, module: Module, kind: str) -> Site:
    """The collective's site: for a reduction (all-reduce, reduce-scatter) the dot it reads;
    for anything else the dot its result feeds, and which operand and dimension."""
    comp = module.computation(instr.computation)
    if kind in ("all-reduce", "reduce-scatter"):
        dot = _backward(instr, comp, module, MAX_HOPS)
        return Site(dot, "output", dot_op_name=dot.op_name) if dot is not None else Site()
    from harness.explain import fused

    dims = fused.collective_op(instr, module).attrs.get("dimensions", ())
    dim = dims[0] if kind == "all-gather" and len(dims) == 1 else None
    # an async pair, or a TPU collective chain, is read from where its result arrives
    start = async_done(module, instr) if instr.opcode.endswith("-start") else \
        fused.done(instr, module) or instr
    return _forward(start or instr, dim, comp, module, MAX_HOPS) or Site()


def free_dims(dot: Instruction, side: str = "rhs") -> tuple[int, ...] | None:
    """The sizes of the non-contracting, non-batch dimensions of a dot's ``side`` operand (the
    weight of ``x @ w`` is its rhs); None for a convolution or unknown shapes."""
    k = 0 if side == "lhs" else 1
    if dot.opcode != "dot" or len(dot.operand_shapes) <= k or len(dot.operand_shapes[k]) != 1:
        return None
    taken = {*dot.attrs.get(f"{side}_contracting_dims", ()), *dot.attrs.get(f"{side}_batch_dims",
                                                                             ())}
    return tuple(d for i, d in enumerate(dot.operand_shapes[k][0].dims) if i not in taken)
