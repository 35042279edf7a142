"""HLO instruction -> ``predictions.rules.OpDesc``: the per-device numbers a cost rule needs.

``to_desc`` dispatches on the opcode through ``DESC_BUILDERS`` (plain instructions take their
shapes and dimension numbers as printed). Shapes in compiled HLO are already per device
(`profiling.md`). Collectives get ``group_axes`` from their replica groups: the sizes of the
named mesh axes when XLA printed the mesh form, otherwise ``(group size,)``.
"""
from __future__ import annotations

from collections.abc import Callable

from harness.hlo.attrs import HloParseError
from harness.hlo.fmha import fmha_desc, is_fmha
from harness.hlo.ir import Instruction, Module
from harness.hlo.walk import async_done
from predictions.rules import OpDesc, Shape

# Operations XLA splits into an async ``<kind>-start`` / ``<kind>-done`` pair.
ASYNC_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "ragged-all-to-all", "collective-broadcast", "copy")


def operand_leaves(instr: Instruction) -> tuple[Shape, ...]:
    return tuple(s for leaves in instr.operand_shapes for s in leaves)


def _group_axes(instr: Instruction, module: Module) -> tuple[int, ...]:
    """Sizes of the mesh axes one group spans: named mesh axes when XLA printed them, else
    (group size,); a permute spans the devices its pairs name."""
    groups = instr.attrs.get("replica_groups")
    if groups is not None:
        if groups.kind == "mesh":
            return tuple(s for s in groups.axis_sizes if s > 1)
        size = module.num_devices if groups.kind == "all" else groups.group_size
        return (size,) if size > 1 else ()
    pairs = instr.attrs.get("source_target_pairs")
    if pairs:
        return (len({d for p in pairs for d in p}),)
    return ()


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
    return OpDesc(instr.opcode, instr.shapes, operand_leaves(instr),
                  a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ()),
                  a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ()),
                  _group_axes(instr, module), a.get("dimensions", ()))


def _async_collective(instr: Instruction, module: Module) -> OpDesc:
    """``all-gather-start`` -> an ``all-gather`` desc whose result is what the ``-done`` returns
    (the ``-start`` result tuple also holds the input buffers and context scalars)."""
    done = async_done(module, instr)
    results = done.shapes if done is not None else instr.shapes[-1:]
    return OpDesc(instr.opcode.removesuffix("-start"), results, operand_leaves(instr),
                  group_axes=_group_axes(instr, module))


def _async_start(instr: Instruction, module: Module) -> OpDesc:
    """A generic ``async-start``: the desc of the instruction it wraps."""
    return to_desc(module.computation(instr.called("calls")[0]).root, module)


def _convolution(instr: Instruction, module: Module) -> OpDesc:
    """A convolution as a dot over the kernel: each output element contracts the kernel's input
    features and window (``rhs_contracting`` = every kernel dim but ``o``)."""
    labels = instr.attrs.get("dim_labels")
    leaves = operand_leaves(instr)
    if labels is None or len(leaves) < 2 or len(labels[1]) != len(leaves[1].dims):
        return _plain(instr, module)
    lhs, rhs, _ = labels
    return OpDesc("convolution", instr.shapes, leaves,
                  lhs_contracting=tuple(i for i, c in enumerate(lhs) if c == "f"),
                  rhs_contracting=tuple(i for i, c in enumerate(rhs) if c != "o"))


def _ints(values) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in values or ())
    except (TypeError, ValueError):
        return ()


def _custom_call(instr: Instruction, module: Module) -> OpDesc:
    """cuBLAS-style GEMM custom calls carry dot dimension numbers in their backend config;
    they are costed as a ``dot`` (result = the first leaf; the rest is workspace). cuDNN fused
    attention calls go to ``harness.hlo.fmha``."""
    if is_fmha(instr):
        return fmha_desc(instr)
    config = instr.backend_config()
    gemm = config.get("gemm_backend_config", config)
    dims = gemm.get("dot_dimension_numbers") if isinstance(gemm, dict) else None
    if not isinstance(dims, dict):
        return _plain(instr, module)
    return OpDesc("dot", instr.shapes[:1], operand_leaves(instr)[:2],
                  _ints(dims.get("lhs_contracting_dimensions")),
                  _ints(dims.get("rhs_contracting_dimensions")),
                  _ints(dims.get("lhs_batch_dimensions")), _ints(dims.get("rhs_batch_dimensions")))


_SLICING = frozenset({"slice", "dynamic-slice", "gather"})


def _users(module: Module, comp_name: str) -> dict[str, list[Instruction]]:
    key = ("users", comp_name)
    if key not in module.cache:
        users: dict[str, list[Instruction]] = {}
        for i in module.computation(comp_name).instructions:
            for name in i.operand_names:
                users.setdefault(name, []).append(i)
        module.cache[key] = users
    return module.cache[key]


def _fusion(instr: Instruction, module: Module) -> OpDesc:
    """A fusion's HBM traffic as operands/results (its FLOPs come from the inner ops): each
    operand once — only the slices when a parameter feeds nothing but slicing ops (a scan
    reading layer i of stacked weights) — and the result once, or only the update when the root
    is a dynamic-update-slice of a parameter, done in place (a scan writing row i of its
    stacked output). This is how XLA's cost analysis counts them too."""
    body = module.computation(instr.called("calls")[0])
    users = _users(module, body.name)
    params = {int(p.literal): p for p in body.instructions if p.opcode == "parameter"}
    root, in_place = body.root, None
    if root.opcode == "dynamic-update-slice" and len(root.operand_names) > 1:
        target = body.by_name[root.operand_names[0]]
        if target.opcode == "parameter" and len(users.get(target.name, ())) == 1:
            in_place = target.name
    operands: list[Shape] = []
    for k, leaves in enumerate(instr.operand_shapes):
        p = params.get(k)
        used_by = users.get(p.name, []) if p is not None else []
        if p is not None and p.name == in_place:
            continue  # updated in place: the untouched rest is neither read nor written
        if used_by and all(u.opcode in _SLICING and u.operand_names[0] == p.name for u in used_by):
            operands.extend(s for u in used_by for s in u.shapes)
        else:
            operands.extend(leaves)
    results = body.by_name[root.operand_names[1]].shapes if in_place else instr.shapes
    return OpDesc("fusion", results, tuple(operands))


DESC_BUILDERS: dict[str, Callable[[Instruction, Module], OpDesc]] = {
    **{f"{c}-start": _async_collective for c in ASYNC_KINDS},
    "async-start": _async_start,
    "convolution": _convolution,
    "custom-call": _custom_call,
    "fusion": _fusion,
}


def to_desc(instr: Instruction, module: Module) -> OpDesc:
    """The per-device description of one instruction that ``predictions.rules`` prices."""
    return DESC_BUILDERS.get(instr.opcode, _plain)(instr, module)

