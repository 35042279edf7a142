"""Work a layout repeats: matmuls every device of an axis computes alike.

Efficiency is judged against the compiled program, so a layout that repeats a matmul on every
device of an axis can look efficient while doing more work than the model needs. Two views:

- ``program_factor``: the program's FLOPs (per device x devices) over the model's FLOPs (the
  workload's ``model_flops``); above 1 the layout repeats work somewhere.
- ``repeated_dots``: per dot, the mesh axes its work is not split over. A dot's work is split
  over every axis that shards one of its operands' dimensions at the dot (a sharded batch or
  output dimension divides the output, a contracting dimension sharded in both divides the sum,
  book.md §4.1); on the other axes each device computes the same thing, so the dot repeats its
  work by the product of their sizes. The operands' shardings are read from the entry
  parameters' ``sharding={devices=[...]...}`` annotations, followed through ops that keep
  their dimensions and through all-gathers (which unshard the gathered dimension); a dot whose
  operands are computed from something else is not judged.
"""
from __future__ import annotations

import math

import pandas as pd

from harness import schema
from harness.explain import axes as mesh_axes
from harness.explain.site import PASS, dot_in
from harness.hlo.cost import instruction_cost
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.shardings import split_axes
from harness.hlo.source import source_line
from harness.hlo.walk import executed

REPEATED = (schema.OP, schema.SOURCE_LINE, schema.SOURCE_OP, schema.FLOPS, schema.REPEAT,
            schema.REPLICATED_AXES)


def _operand_split(comp: Computation, name: str, module: Module, mesh: dict[str, int],
                   hops: int = 8) -> list[set[str]] | None:
    """Per dimension, the axes the value ``name`` is split over, traced to an entry parameter
    (through a fusion's parameter to the fusion's operand; through all-gathers)."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return None
    if instr.opcode == "parameter":
        if comp.is_entry:
            return split_axes(instr.attrs.get("sharding", ""), len(instr.shapes[0].dims), mesh)
        return _through_caller(comp, instr, module, mesh, hops)
    if not instr.operand_names:
        return None
    src = _operand_split(comp, instr.operand_names[0], module, mesh, hops - 1)
    if src is None:
        return None
    if instr.opcode in ("all-gather", "all-gather-start"):
        gathered = set(mesh_axes.mesh_axes(mesh_axes.device_groups(instr, module), mesh) or ())
        return [s - gathered if d in instr.attrs.get("dimensions", ()) else s
                for d, s in enumerate(src)]
    if instr.opcode == "transpose":
        return [src[p] for p in instr.attrs.get("dimensions", ())]
    same_rank = len(instr.shapes) == 1 and len(instr.shapes[0].dims) == len(src)
    return src if instr.opcode in PASS | {"all-gather-done"} and same_rank else None


def _through_caller(body: Computation, param: Instruction, module: Module,
                    mesh: dict[str, int], hops: int) -> list[set[str]] | None:
    """A fusion's parameter: the split of the operand the fusion passes in its place."""
    k = int(param.literal.strip() or -1)
    for comp in module.computations.values():
        for instr in comp.instructions:
            if body.name in instr.called("calls") and k < len(instr.operand_names):
                return _operand_split(comp, instr.operand_names[k], module, mesh, hops - 1)
    return None


def dot_repeat(dot: Instruction, module: Module, mesh: dict[str, int]
               ) -> tuple[str, ...] | None:
    """The mesh axes a dot's work is repeated over (() when split over every axis); None
    when its operands' shardings cannot be traced."""
    comp = module.computation(dot.computation)
    split: set[str] = set()
    for name in dot.operand_names[:2]:
        dims = _operand_split(comp, name, module, mesh)
        if dims is None:
            return None
        split |= set().union(*dims) if dims else set()
    return tuple(a for a in mesh if a not in split and mesh[a] > 1)


def repeated_dots(module: Module, mesh: dict[str, int]) -> pd.DataFrame:
    """``REPEATED``: each dot (or fusion holding one) that repeats its work over some axes,
    with its FLOPs per device per step, the factor and the axes."""
    rows = []
    for instr, count in executed(module):
        if instr.opcode not in ("dot", "convolution", "fusion") or \
                module.computation(instr.computation).name not in _run_as_ops(module):
            continue
        dot = dot_in(instr, module)
        replicated = dot_repeat(dot, module, mesh) if dot is not None else None
        if not replicated:
            continue
        rows.append({schema.OP: instr.name, schema.SOURCE_LINE: source_line(instr, module),
                     schema.SOURCE_OP: instr.op_name,
                     schema.FLOPS: instruction_cost(instr, module).flops * count,
                     schema.REPEAT: float(math.prod(mesh[a] for a in replicated)),
                     schema.REPLICATED_AXES: ",".join(replicated)})
    return pd.DataFrame(rows, columns=list(REPEATED))


def _run_as_ops(module: Module) -> set[str]:
    """Computations whose instructions run as ops (not fused bodies)."""
    fused = {c for comp in module.computations.values() for i in comp.instructions
             for c in i.called("calls")}
    return {name for name in module.computations if name not in fused}


def program_factor(hlo_flops_per_device: float | None, devices: int | None,
                   model_flops: float | None) -> float | None:
    """The program's FLOPs over the model's: per device x devices / model (None where a
    figure is missing or the model does no FLOPs)."""
    if not hlo_flops_per_device or not devices or not model_flops:
        return None
    return hlo_flops_per_device * devices / model_flops


def repeated_lines(module: Module, mesh: dict) -> list[str]:
    """One line per dot that repeats its work over some mesh axes, with the book's fix (§6.1)."""
    lines = []
    for _, r in repeated_dots(module, mesh).iterrows():
        where = f" ({r[schema.SOURCE_LINE]})" if r[schema.SOURCE_LINE] else ""
        lines.append(f"{r[schema.OP]}{where} repeats its work {r[schema.REPEAT]:g}x over "
                     f"{r[schema.REPLICATED_AXES]}: no operand is split over it "
                     f"(fix: shard the batch or a weight dimension over it, book §6.1)")
    return lines
