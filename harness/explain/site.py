"""Where a collective sits in the program: the matmul it feeds or is fed by (`sharding.md`).

The book's four cases (book.md §4.1) say why a sharded matmul needs communication: an
all-reduce or reduce-scatter of a dot's *output* sums partial products over a contracting
dimension sharded on the collective's axes (case 3); an all-gather of a dot's *operand* undoes
a sharding the local multiply cannot use, on its contracting dimension (case 2) or on a
non-contracting one that the other operand shares (case 4). ``locate`` follows the
collective's data through ops that only move or relabel it (copies, converts, transposes,
bitcasts, async halves, fusions of those) to the first dot, convolution or fusion holding one,
and says which side of it the collective is on and which dimension it gathered.

A reduction is a weight gradient's (book §6.1: data parallelism sums each weight's gradient
over the batch shards) where it sums a backward-pass value (JAX names those ops
``transpose(jvp(...))``) shaped like an entry parameter on this device: ``gradients`` names the
parameters. XLA combines the gradient all-reduces of a step into one, so every operand counts.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.signature import parameters
from harness.hlo.walk import async_done

DOTS = frozenset({"dot", "convolution"})
# ops that move or relabel data without combining elements across it
PASS = frozenset({"bitcast", "reshape", "copy", "convert", "transpose", "get-tuple-element",
                  "copy-start", "copy-done", "optimization-barrier", "fusion", "negate",
                  "multiply", "add", "select", "broadcast", "dynamic-slice", "slice",
                  "all-gather-done", "collective-permute-done", "all-reduce-done"})
MAX_HOPS = 6  # ops followed from the collective before giving up
BACKWARD = "transpose("  # in the op_name of every op JAX's autodiff made for the backward pass


@dataclass(frozen=True)
class Site:
    """A collective's place relative to a matmul. ``dot``: the dot or convolution (inside its
    fusion where fused), None when none is near; ``side``: "output" (the collective reads the
    dot's result), "lhs" or "rhs" (it feeds that operand); ``dim``: for a gathered operand,
    "contracting", "batch" or "non-contracting" ("" when the gathered dim was lost on the way);
    ``parameter``: the entry parameter the gathered data comes from (its metadata name, e.g.
    "w"), "" when it is computed; ``dot_op_name``: the dot's metadata op_name."""

    dot: Instruction | None = None
    side: str = ""
    dim: str = ""
    parameter: str = ""
    dot_op_name: str = ""


def _users(module: Module, comp: Computation) -> dict[str, list[Instruction]]:
    users = module.derived.users.get(comp.name)
    if users is None:
        users = {}
        for i in comp.instructions:
            for name in i.operand_names:
                users.setdefault(name, []).append(i)
        module.derived.users[comp.name] = users
    return users


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


def _into_fusion(fusion: Instruction, k: int, dim: int | None, module: Module) -> Site | None:
    """Follow operand ``k`` of a fusion inside it to the dot it feeds."""
    body = module.computation(fusion.called("calls")[0])
    param = next((i for i in body.instructions
                  if i.opcode == "parameter" and i.literal.strip() == str(k)), None)
    return _forward(param, dim, body, module, MAX_HOPS) if param is not None else None


def _forward(instr: Instruction, dim: int | None, comp: Computation, module: Module,
             hops: int) -> Site | None:
    """The first dot ``instr``'s data reaches, through ops that pass it on."""
    if hops <= 0:
        return None
    for user in _users(module, comp).get(instr.name, []):
        dot = dot_in(user, module)
        if dot is not None and user.opcode in DOTS:
            side = "lhs" if user.operand_names[0] == instr.name else "rhs"
            return Site(dot, side, _dim_role(dot, side, dim), dot_op_name=dot.op_name)
        if dot is not None:  # a fusion holding a dot: follow the operand inside it
            found = _into_fusion(user, user.operand_names.index(instr.name), dim, module)
            if found is not None:
                return found
            continue
        if user.opcode in PASS:
            nxt = user
            if user.opcode.endswith("-start"):
                nxt = async_done(module, user) or user
            found = _forward(nxt, _carry(dim, instr, user), comp, module, hops - 1)
            if found is not None:
                return found
    return None


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
    return _backward(src, comp, module, hops - 1) if src.opcode in PASS else None


def _parameter(instr: Instruction, comp: Computation, hops: int = MAX_HOPS) -> str:
    """The metadata name of the entry parameter ``instr``'s data comes from ("" if none)."""
    while hops > 0 and instr.opcode != "parameter" and instr.operand_names:
        src = comp.by_name.get(instr.operand_names[0])
        if src is None or src.opcode not in PASS | {"parameter"}:
            return ""
        instr, hops = src, hops - 1
    if instr.opcode != "parameter":
        return ""
    return instr.op_name or f"parameter {instr.literal.strip()}"


def locate(instr: Instruction, module: Module, kind: str) -> Site:
    """The collective's site: for a reduction (all-reduce, reduce-scatter) the dot it reads;
    for anything else the dot its result feeds, and which operand and dimension."""
    comp = module.computation(instr.computation)
    if kind in ("all-reduce", "reduce-scatter"):
        dot = _backward(instr, comp, module, MAX_HOPS)
        return Site(dot, "output", dot_op_name=dot.op_name) if dot is not None else Site()
    dims = instr.attrs.get("dimensions", ())
    dim = dims[0] if kind == "all-gather" and len(dims) == 1 else None
    start = async_done(module, instr) if instr.opcode.endswith("-start") else instr
    site = _forward(start or instr, dim, comp, module, MAX_HOPS)
    if site is None:
        return Site()
    on_weight = comp.is_entry and _parameter(instr, comp)
    return Site(site.dot, site.side, site.dim, on_weight or "", site.dot_op_name)


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


def gradients(instr: Instruction, module: Module) -> tuple[str, ...]:
    """The entry parameters whose gradients a reduction sums (their metadata names, else
    ``parameter k``): for each operand from the backward pass, a parameter of its shape, or its
    result's, on this device (one of the very shape first, then one transposed; each parameter
    once); () for none. Scalars are left out (a loss is one too)."""
    free = [(p.dims, p.name or f"parameter {p.index}") for p in parameters(module) if p.dims]
    comp = module.computation(instr.computation)
    found = []
    for k, name in enumerate(instr.operand_names):
        src = comp.by_name.get(name)
        if src is None or len(src.shapes) != 1 or not _backward_value(src, comp):
            continue
        dims = {tuple(src.shapes[0].dims)} | ({tuple(instr.shapes[k].dims)}
                                              if k < len(instr.shapes) else set())
        hit = (next((p for p in free if p[0] in dims), None)
               or next((p for p in free if sorted(p[0]) in map(sorted, dims)), None))
        if hit is not None:
            free.remove(hit)
            found.append(hit[1])
    return tuple(found)


def free_dims(dot: Instruction, side: str = "rhs") -> tuple[int, ...] | None:
    """The sizes of the non-contracting, non-batch dimensions of a dot's ``side`` operand (the
    weight of ``x @ w`` is its rhs); None for a convolution or unknown shapes."""
    k = 0 if side == "lhs" else 1
    if dot.opcode != "dot" or len(dot.operand_shapes) <= k or len(dot.operand_shapes[k]) != 1:
        return None
    taken = {*dot.attrs.get(f"{side}_contracting_dims", ()), *dot.attrs.get(f"{side}_batch_dims",
                                                                             ())}
    return tuple(d for i, d in enumerate(dot.operand_shapes[k][0].dims) if i not in taken)
