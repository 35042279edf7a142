"""HLO instruction -> ``predictions.rules.OpDesc``: the per-device numbers a cost rule needs.

``to_desc`` dispatches on the opcode through ``DESC_BUILDERS`` (plain instructions take their
shapes and dimension numbers as printed). Shapes in compiled HLO are already per device
(`profiling.md`). Collectives get ``group_axes`` from their replica groups: the sizes of the
named mesh axes when XLA printed the mesh form, otherwise ``(group size,)``; and ``groups``,
the device ids of each group (``harness.hlo.groups``), which a network prices by level.
"""
from __future__ import annotations

from collections.abc import Callable

from harness.hlo import calls, conv, spaces
from harness.hlo.attrs import HloParseError
from harness.hlo.groups import replica_groups
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import async_done
from predictions.rules import ASYNC_SLICES, COLLECTIVE_OPCODES, ELEMENTWISE, OpDesc, Shape

# Operations XLA splits into an async ``<kind>-start`` / ``<kind>-done`` pair.
ASYNC_KINDS = (*COLLECTIVE_OPCODES, "copy", "fusion")


def _group_axes(instr: Instruction, module: Module) -> tuple[int, ...]:
    """Sizes of the mesh axes one group spans: named mesh axes when XLA printed them, else
    (group size,); a permute spans the largest set of devices its pairs connect (one ring of a
    collective matmul, not every device that takes part in some ring)."""
    groups = instr.attrs.get("replica_groups")
    if groups is not None:
        if groups.kind == "mesh":
            return tuple(s for s in groups.axis_sizes if s > 1)
        size = module.num_devices if groups.kind == "all" else groups.group_size
        return (size,) if size > 1 else ()
    pairs = instr.attrs.get("source_target_pairs")
    if pairs:
        return (_largest_ring(pairs),)
    return ()


def _largest_ring(pairs) -> int:
    """Devices in the largest connected set of a permute's (source, target) pairs."""
    parent: dict[int, int] = {}

    def root(d: int) -> int:
        while parent.setdefault(d, d) != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    for pair in pairs:
        a, b = root(pair[0]), root(pair[-1])
        parent[a] = b
    sizes: dict[int, int] = {}
    for d in list(parent):
        sizes[root(d)] = sizes.get(root(d), 0) + 1
    return max(sizes.values())


def _check_dims(instr: Instruction) -> None:
    """Dimension numbers must index the shapes they refer to (the rules index with them)."""
    a, ops = instr.attrs, [leaves[0].dims if leaves else () for leaves in instr.operand_shapes]
    rank = max([len(s.dims) for s in instr.shapes[:1]] + [len(d) for d in ops[:1]] + [0])
    checks = [("dimensions", rank)]
    if len(ops) >= 2:
        checks += [("lhs_contracting_dims", len(ops[0])), ("lhs_batch_dims", len(ops[0])),
                   ("rhs_contracting_dims", len(ops[1])), ("rhs_batch_dims", len(ops[1]))]
    for key, n in checks:
        bad = [d for d in a.get(key, ()) if not 0 <= d < n]
        if bad:
            raise HloParseError(f"line {instr.line}: {key}={{{','.join(map(str, a[key]))}}} of "
                                f"%{instr.name} is out of range for rank {n}")


def _plain(instr: Instruction, module: Module) -> OpDesc:
    _check_dims(instr)
    a = instr.attrs
    return OpDesc(instr.opcode, instr.shapes, instr.operand_leaves,
                  a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ()),
                  a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ()),
                  _group_axes(instr, module), a.get("dimensions", ()),
                  groups=replica_groups(instr, module))


def _ragged_dot(instr: Instruction, module: Module) -> OpDesc:
    """A ``ragged-dot`` (``jax.lax.ragged_dot``: lhs [m, k] whose rows fall in g groups by
    ``group_sizes`` [g], rhs [g, k, n]) as the dot it computes: every row meets the one group's
    matrix it belongs to, so 2·m·k·n FLOPs whatever the split (roofline.md's 2 x every
    distinct dimension, the group dimension not among them). Described as a dot whose rhs group
    dimension is a batch dimension of the rhs alone (``rules._dot``: 2 x lhs elements x the
    rhs's free dimensions); the same holds where the ragged dimension is contracted (the
    weight gradient, result [g, k, n]) or a batch one. Bytes: every operand (the whole [g, k,
    n] weight and the group sizes) and the result, once."""
    desc = _plain(instr, module)
    groups = instr.attrs.get("rhs_group_dims", ())
    return OpDesc("dot", desc.results, desc.operands, desc.lhs_contracting,
                  desc.rhs_contracting, desc.lhs_batch, tuple(desc.rhs_batch) + tuple(groups))


def _async_collective(instr: Instruction, module: Module) -> OpDesc:
    """``all-gather-start`` -> an ``all-gather`` desc whose result is what the ``-done`` returns
    (the ``-start`` result tuple also holds the input buffers and context scalars)."""
    done = async_done(module, instr)
    results = done.shapes if done is not None else instr.shapes[-1:]
    return OpDesc(instr.opcode.removesuffix("-start"), results, instr.operand_leaves,
                  group_axes=_group_axes(instr, module), groups=replica_groups(instr, module))


def _async_slice(instr: Instruction, module: Module) -> OpDesc:
    """``slice-start``, ``dynamic-slice-start``, ``dynamic-update-slice-start`` (libtpu moving a
    saved activation to or from host memory, a layer at a time) -> the synchronous op's desc:
    operands as printed (the buffer, the update, the indices), the result what the ``-done``
    returns (the start's result tuple holds the operands, the result and a context)."""
    done = async_done(module, instr)
    results = done.shapes if done is not None else instr.shapes[-2:-1]
    return OpDesc(instr.opcode.removesuffix("-start"), tuple(results), instr.operand_leaves)


def _async_start(instr: Instruction, module: Module) -> OpDesc:
    """A generic ``async-start``: the desc of the instruction it wraps."""
    return to_desc(module.computation(instr.called("calls")[0]).root, module)


def _convolution(instr: Instruction, module: Module) -> OpDesc:
    """A convolution as a dot over the kernel: each output element contracts the kernel's input
    features (``rhs_contracting``) and the window positions that meet input data
    (``window_positions``; the TPU compiler prints batched matmuls this way)."""
    labels = instr.attrs.get("dim_labels")
    leaves = instr.operand_leaves
    if labels is None or len(leaves) < 2 or len(labels[1]) != len(leaves[1].dims):
        return _plain(instr, module)
    # the window part counts only positions that meet input data (harness.hlo.conv)
    return conv.describe("convolution", instr.shapes, leaves, labels,
                         instr.attrs.get("window") or {}, leaves[0], leaves[1], instr.shapes[0])


def _custom_call(instr: Instruction, module: Module) -> OpDesc:
    """Library calls and kernels: ``harness.hlo.calls`` (cuBLAS/hipBLASLt GEMMs, cuDNN/MIOpen
    convolutions, fused attention, Pallas kernels, libtpu's bookkeeping calls)."""
    return calls.to_desc(instr)


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


def _fusion(instr: Instruction, module: Module) -> OpDesc:
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


DESC_BUILDERS: dict[str, Callable[[Instruction, Module], OpDesc]] = {
    **{f"{c}-start": _async_collective for c in ASYNC_KINDS},
    **{f"{s}-start": _async_slice for s in ASYNC_SLICES},
    "async-start": _async_start,
    "convolution": _convolution,
    "ragged-dot": _ragged_dot,
    "custom-call": _custom_call,
    "fusion": _fusion,
    "fusion-start": _fusion,  # an async fusion, printed with the async syntax sugar
}


def to_desc(instr: Instruction, module: Module) -> OpDesc:
    """The per-device description of one instruction that ``predictions.rules`` prices (a copy
    from or to host memory as ``rules.HOST_COPY``: ``harness.hlo.spaces``)."""
    desc = DESC_BUILDERS.get(instr.opcode, _plain)(instr, module)
    return spaces.on_host_link(desc, instr, module)

