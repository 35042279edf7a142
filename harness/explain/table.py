"""The COLLECTIVES table: every collective of a program, where it came from and why.

One row per collective instruction that runs (an async pair is one row, named by its
``-start``): its source line and JAX operation (``harness.hlo.source``), mesh axes
(``harness.explain.axes``), bytes per device, the book's reason and fix
(``harness.explain.reasons``), and where a run is given, its roofline time on the run's chip
and topology (the OPS table's ``predicted_s``), measured time and the part of it the step
waited for (the step object's ``comm_s`` and ``exposed_comm_s``, both from the timeline; the
OPS table's ``measured_s`` for a collective the step object does not list).
Ranked by exposed time, then measured, then predicted.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from harness import schema
from harness.explain import axes, dataflow, fused, gradients, megatron, reasons, site
from harness.explain.loops import regathered as regathered_times
from harness.explain.loops import regathered_parameter
from harness.hlo.desc import to_desc
from harness.hlo.groups import replica_groups
from harness.hlo.ir import Instruction, Module
from harness.hlo.source import source_line
from harness.hlo.walk import async_done, executed
from predictions.rules import COLLECTIVE_OPCODES


def collective_kind(instr: Instruction, module: Module | None = None) -> str:
    """The collective an instruction is (``all-gather-start`` -> all-gather), "" for none and
    for the ``-done`` half of an async pair; given its ``module``, a TPU fusion that wraps one
    too (``harness.explain.fused``: an all-reduce-scatter fusion is a reduce-scatter)."""
    kind = COLLECTIVE_OPCODES.get(instr.opcode.removesuffix("-start"), "")
    if kind or module is None:
        return kind
    found = fused.fused(instr, module)
    return found[0] if found is not None else ""


def _bytes(instr: Instruction, module: Module) -> float:
    """The larger of the collective's input and output on one device (book §4.2's V)."""
    desc = to_desc(fused.collective_op(instr, module), module)
    return max(sum(s.nbytes for s in desc.operands), sum(s.nbytes for s in desc.results))


def _loops(module: Module) -> dict[str, bool]:
    """While bodies -> whether the body holds a dot (a collective matmul's loop does)."""
    out = {}
    for comp in module.computations.values():
        for instr in comp.instructions:
            for body in instr.called("body") if instr.opcode == "while" else ():
                out[body] = any(site.dot_in(i, module) is not None
                                for i in module.computation(body).instructions)
    return out


def _level(instr: Instruction, module: Module, kind: str, system) -> str:
    """The network level that binds the collective on ``system`` ("" without one, or for a
    kind or groups the levels do not price: a permute's pairs)."""
    from harness.explain.levels import binding_text
    from predictions import levels

    groups = replica_groups(fused.collective_op(instr, module), module) \
        if system is not None else None
    if not groups or kind not in levels.PRICED:
        return ""
    nbytes = _bytes(instr, module) or 1.0  # the level that binds does not depend on V
    return binding_text(levels.price(kind, nbytes, groups, system), system)


# the reasons whose sentence says how much of the collective the step waited for
EXPOSURE_NAMED = frozenset({"stage transfer", "expert dispatch", "expert combine"})


def exposure(exposed_s: float, measured_s: float) -> str:
    """"; exposed: the step waited 1.2 ms of its 1.5 ms" or "; hidden under compute: ..."
    ("" where the run measured neither)."""
    from harness.units import fmt_seconds

    if math.isnan(exposed_s) or math.isnan(measured_s):
        return ""
    if exposed_s <= 0:
        return f"; hidden under compute: the step waited none of its {fmt_seconds(measured_s)}"
    return f"; exposed: the step waited {fmt_seconds(exposed_s)} of its {fmt_seconds(measured_s)}"


def _facts(instr: Instruction, module: Module, kind: str, mesh_axes: str,
           loops: dict[str, bool], system=None, names=None,
           reduced: frozenset = frozenset(), mesh: dict[str, int] | None = None
           ) -> reasons.Facts:
    """What the reasons read of one collective (``reduced``: (parameter, axes) of every
    gradient the program reduces)."""
    comp = module.computation(instr.computation)
    where = site.locate(instr, module, kind)
    regathered = regathered_times(instr, module)
    if kind == "all-gather":
        where = replace(where, parameter=gradients.parameter_of(instr, comp, names) or (
            regathered_parameter(instr, module, names) if regathered else ""))
    stage_axis, stage_dot = _stage(instr, module, mesh)
    if stage_dot is not None:
        where = replace(where, dot=stage_dot)
    reduces = kind in ("all-reduce", "reduce-scatter")
    largest = max(instr.shapes, key=lambda s: s.elements, default=None)
    axes_text = mesh_axes if "{" not in mesh_axes else ""
    return reasons.Facts(kind, axes_text, where,
                         in_loop=instr.computation in loops,
                         loop_has_dot=loops.get(instr.computation, False),
                         source_op=instr.op_name, group=_group(instr, module),
                         gradients=gradients.gradients(instr, module, names) if reduces else (),
                         dims=tuple(largest.dims) if largest is not None else None,
                         weight_free=site.free_dims(where.dot) if where.dot is not None
                         else None, level=_level(instr, module, kind, system),
                         ring=dataflow.ring(instr, module), sliced=dataflow.sliced(instr, module),
                         fsdp=(where.parameter, mesh_axes) in reduced,
                         stage_axis=stage_axis,
                         expert=dataflow.expert_role(instr, module),
                         regathered=regathered, fused=fused.note(instr, module),
                         handoff=dataflow.hands_block(instr, module),
                         megatron=megatron.megatron(instr, module),
                         nbytes=_bytes(instr, module),
                         dtype=largest.dtype if largest is not None else "")


def _stage(instr: Instruction, module: Module, mesh: dict[str, int] | None
           ) -> tuple[str, Instruction | None]:
    """(the mesh axis a pipeline's stage transfer shifts along, the next stage's layer matmul
    that reads it); ("", None) for any other collective (``dataflow.stage``,
    ``axes.shift_axis``)."""
    dot = dataflow.stage(instr, module)
    if dot is None:
        return "", None
    if not mesh:  # no names: the pairs' ring itself
        return "its ring of devices", dot
    return axes.shift_axis(instr.attrs.get("source_target_pairs"), mesh), dot


def _reduced(module: Module, mesh: dict[str, int] | None, names) -> frozenset:
    """(parameter, mesh axes as ``axes.describe`` gives them) of each weight gradient the
    program reduces."""
    out = set()
    for instr, _ in executed(module):
        if collective_kind(instr, module) in ("all-reduce", "reduce-scatter"):
            over = axes.describe(fused.collective_op(instr, module), module, mesh)
            out |= {(p, over) for p in gradients.gradients(instr, module, names)}
    return frozenset(out)


def _group(instr: Instruction, module: Module) -> int:
    """Devices in the collective's largest group (0 where its groups are not known)."""
    groups = axes.device_groups(fused.collective_op(instr, module), module)
    return max((len(g) for g in groups), default=0) if groups else 0


def _names(instr: Instruction, module: Module) -> list[str]:
    """The op names the trace and the OPS table may give the collective: start and done."""
    done = async_done(module, instr) if instr.opcode.endswith("-start") else \
        fused.done(instr, module)
    return [instr.name] + ([done.name] if done is not None else [])


def _per_op(table: pd.DataFrame | None, column: str, program: str,
            program_id: str) -> dict[str, float]:
    """Op -> ``column`` of one compilation's rows of an OPS table: its program's name, and
    its program id where the table names one (two compilations are never summed)."""
    if table is None or column not in table.columns or not len(table):
        return {}
    rows = table[table[schema.PROGRAM] == program] if schema.PROGRAM in table.columns else table
    if schema.PROGRAM_ID in rows.columns and program_id:
        rows = rows[rows[schema.PROGRAM_ID].astype(str) == program_id]
    return rows.groupby(schema.OP)[column].sum(min_count=1).to_dict()


def _sum(values: dict[str, float], names: list[str]) -> float:
    found = [values[n] for n in names if n in values and not pd.isna(values[n])]
    return float(sum(found)) if found else math.nan


def collectives(module: Module, *, mesh: dict[str, int] | None = None,
                ops: pd.DataFrame | None = None, step: dict | None = None,
                program_id: str = "", system=None,
                priced: pd.DataFrame | None = None,
                names: Sequence[str] | None = None) -> pd.DataFrame:
    """``schema.COLLECTIVES`` of one compilation (``program_id``, "" where none is known).
    ``mesh``: the run's named axes ({"X": 4, "Y": 2}); ``ops``: an OPS table (a run's, or
    ``hlo_costs``' predicted one) for ``predicted_s`` and ``measured_s``, its rows of this
    compilation; ``step``: the step object of this compilation, whose per-op
    ``exposed_comm_s`` it takes. Columns whose source is not given are NaN. ``system`` (a
    ``predictions.network`` System): each reason names the network level that binds it;
    ``priced``: an OPS table whose ``predicted_s`` is taken instead of ``ops``' (``hlo_costs``
    on that system); ``names``: the user's pytree path of each entry parameter, by its
    number (the capture's; for JAX's placeholder names ``Arg_k.n``)."""
    loops, reduced = _loops(module), _reduced(module, mesh, names)
    predicted = _per_op(ops if priced is None else priced, schema.PREDICTED_S, module.name,
                        program_id)
    listed = (step or {}).get(schema.STEP_COLLECTIVES) or []
    exposed = {r[schema.OP]: r[schema.EXPOSED_COMM_S] for r in listed}
    # the time the exposed part is of: the step's own (durations on the timeline), else the
    # OPS table's (on a CPU host that is the op's share of the shared cores, harness.measure.shares,
    # which its exposed part could exceed)
    measured = {**_per_op(ops, schema.MEASURED_S, module.name, program_id),
                **{r[schema.OP]: r[schema.COMM_S] for r in listed}}
    rows = []
    for instr, count in executed(module):
        kind = collective_kind(instr, module)
        if not kind:
            continue
        inner = fused.collective_op(instr, module)
        mesh_axes = axes.describe(inner, module, mesh)
        name, why, fix = reasons.explain(_facts(instr, module, kind, mesh_axes, loops, system,
                                                names, reduced, mesh))
        op_names = _names(instr, module)
        if name in EXPOSURE_NAMED:
            why += exposure(_sum(exposed, op_names), _sum(measured, op_names))
        rows.append({
            schema.PROGRAM: module.name, schema.PROGRAM_ID: program_id, schema.OP: instr.name,
            schema.COLLECTIVE: kind,
            # a TPU chain's start fusion carries no metadata: its collective's
            schema.SOURCE_LINE: source_line(instr, module) or source_line(inner, module),
            schema.SOURCE_OP: instr.op_name or inner.op_name,
            schema.MESH_AXES: mesh_axes, schema.DEVICE_BYTES: _bytes(instr, module),
            schema.COUNT: count, schema.REASON: name,
            schema.PREDICTED_S: _sum(predicted, op_names),
            schema.MEASURED_S: _sum(measured, op_names),
            schema.EXPOSED_COMM_S: _sum(exposed, op_names), schema.WHY: why, schema.FIX: fix,
        })
    df = pd.DataFrame(rows, columns=list(schema.COLLECTIVES))
    if not len(df):
        return df
    return df.sort_values([schema.EXPOSED_COMM_S, schema.MEASURED_S, schema.PREDICTED_S,
                           schema.DEVICE_BYTES], ascending=False, na_position="last",
                          kind="stable").reset_index(drop=True)
