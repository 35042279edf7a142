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
from harness.hlo.fusion_desc import fusion_desc
from harness.hlo.groups import replica_groups
from harness.hlo.ir import Instruction, Module
from harness.hlo.walk import async_done
from predictions.rules import ASYNC_SLICES, COLLECTIVE_OPCODES, OpDesc

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


DESC_BUILDERS: dict[str, Callable[[Instruction, Module], OpDesc]] = {
    **{f"{c}-start": _async_collective for c in ASYNC_KINDS},
    **{f"{s}-start": _async_slice for s in ASYNC_SLICES},
    "async-start": _async_start,
    "convolution": _convolution,
    "ragged-dot": _ragged_dot,
    "custom-call": _custom_call,
    "fusion": fusion_desc,
    "fusion-start": fusion_desc,  # an async fusion, printed with the async syntax sugar
}


def to_desc(instr: Instruction, module: Module) -> OpDesc:
    """The per-device description of one instruction that ``predictions.rules`` prices (a copy
    from or to host memory as ``rules.HOST_COPY``: ``harness.hlo.spaces``)."""
    desc = DESC_BUILDERS.get(instr.opcode, _plain)(instr, module)
    return spaces.on_host_link(desc, instr, module)

