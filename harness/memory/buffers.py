"""The buffers live at the compiled peak: each one's size, shape, the HLO op that makes it, its
JAX operation and source line, and what it holds (``harness.memory.kinds``); and live bytes
over the step.

``at_peak(assignment, module)`` joins XLA's list of the buffers live at its peak
(``harness.memory.assignment``) with the scheduled HLO the same dump holds
(``harness.hlo.parse_module``; source lines by ``harness.hlo.source``). By construction the
rows add up to XLA's peak of live buffers.
"""
from __future__ import annotations

import re

import pandas as pd

from harness import schema
from harness.hlo.attrs import HloParseError
from harness.hlo.ir import Instruction, Module
from harness.hlo.source import source_line
from harness.memory import kinds
from harness.memory.assignment import Assignment

_INDEX = re.compile(r"^(.*)\{(\d+)\}$")
_CARRIERS = ("parameter", "get-tuple-element", "while", "tuple", "copy", "bitcast")


def _instruction(module: Module | None, name: str) -> Instruction | None:
    if module is None:
        return None
    try:
        return module.instruction(name)
    except HloParseError:
        return None


def _split(key: str) -> tuple[str, int | None]:
    m = _INDEX.match(key)
    return (m.group(1), int(m.group(2))) if m else (key, None)


def _callers(module: Module) -> dict[str, Instruction]:
    """Loop body computation -> the ``while`` that runs it."""
    out = {}
    for comp in module.computations.values():
        for instr in comp.instructions:
            if instr.opcode == "while":
                for body in instr.called("body"):
                    out[body] = instr
    return out


def _step(module: Module, instr: Instruction, index: int | None, callers: dict
          ) -> tuple[Instruction | None, int | None]:
    """One step back toward what made a carried value: a loop's element i is its body's
    result element i; a body parameter's element i the loop's operand's; a tuple's element i
    its operand i; an in-place update its update; anything else its first operand."""
    if instr.opcode == "while" and index is not None and instr.called("body"):
        root = module.computations.get(instr.called("body")[0])
        return (root.root if root is not None else None), index
    if instr.opcode == "parameter" and instr.computation in callers:
        return _instruction(module, callers[instr.computation].operand_names[0]), index
    if instr.opcode == "tuple" and index is not None and index < len(instr.operand_names):
        return _instruction(module, instr.operand_names[index]), None
    if "dynamic_update" in instr.op_name and len(instr.operand_names) > 1:
        return _instruction(module, instr.operand_names[1]), None
    return (_instruction(module, instr.operand_names[0]) if instr.operand_names else None), None


def origin(module: Module | None, key: str, callers: dict, depth: int = 8
           ) -> tuple[str, Instruction | None]:
    """The op_name of what made a buffer: its own, or for a loop's carried element, a body
    parameter or an op that names no JAX operation (a convert XLA added), the first one named
    on the way back through loops, tuples and operands (``_step``; "" if none in ``depth``),
    and that instruction."""
    name, index = _split(key)
    instr = _instruction(module, name)
    for _ in range(depth):
        if instr is None:
            return "", None
        carried = instr.opcode in ("while", "tuple") and index is not None
        looped = instr.opcode == "parameter" and instr.computation in callers
        if instr.op_name and not carried and not looped and "dynamic_update" not in \
                instr.op_name:
            return instr.op_name, instr
        instr, index = _step(module, instr, index, callers)
    return "", None


def parameter_dims(assignment: Assignment, module: Module | None) -> set[tuple[int, ...]]:
    """The per-device shapes of the parameters (``params`` arguments): a backward value of one
    of these shapes is a gradient."""
    out = set()
    for v in assignment.values.values():
        instr = _instruction(module, _split(v.key)[0])
        if v.role == "parameter" and instr is not None and instr.op_name.startswith("params"):
            out.add(kinds.dims(v.shape))
    return out


def _row(key: str, size: int, assignment: Assignment, module: Module | None, callers: dict,
         context: dict) -> dict:
    v = assignment.values.get(key)
    instr = _instruction(module, _split(key)[0])
    op_name = instr.op_name if instr is not None else ""
    came, maker = origin(module, key, callers)
    came = "" if came == op_name else came
    where = next((source_line(i, module) for i in (instr, maker) if i is not None
                  and source_line(i, module)), "")
    shape = v.shape if v is not None else ""
    kind = kinds.kind_of(kinds.Buffer(v.role if v else "other", op_name, shape, came, context))
    scope = came or op_name
    if kind == kinds.ACTIVATIONS:
        scope = f"{kinds.checkpoint_name(scope)} ({scope})"
    start, end = assignment.ranges.get(key, (None, None))
    return {schema.BUFFER: key, schema.HOLDS: kind, schema.BUFFER_BYTES: size,
            schema.SHAPE: shape, schema.OPCODE: instr.opcode if instr is not None else "",
            schema.OP: _split(key)[0], schema.SCOPE: scope,
            schema.SOURCE_LINE: where,
            schema.LIVE_FROM: start, schema.LIVE_TO: end}


def at_peak(assignment: Assignment, module: Module | None) -> pd.DataFrame:
    """``schema.BUFFERS``: one row per buffer live at XLA's peak, largest first."""
    callers = _callers(module) if module is not None else {}
    context = {"parameter_dims": parameter_dims(assignment, module)}
    rows = [_row(k, size, assignment, module, callers, context)
            for k, size in assignment.peak.items()]
    df = pd.DataFrame(rows, columns=list(schema.BUFFERS))
    return df.sort_values(schema.BUFFER_BYTES, ascending=False, kind="stable").reset_index(
        drop=True)


def by_kind(buffers: pd.DataFrame) -> dict[str, int]:
    """Bytes at the peak per kind, in ``kinds.KINDS`` order (kinds with none left out)."""
    sums = buffers.groupby(schema.HOLDS)[schema.BUFFER_BYTES].sum() if len(buffers) else {}
    return {k: int(sums[k]) for k in kinds.KINDS if k in sums}


def timeline(assignment: Assignment) -> pd.DataFrame:
    """``schema.TIMELINE``: live bytes at each point of the flattened schedule."""
    pos, live = assignment.timeline()
    return pd.DataFrame({schema.POSITION: pos, schema.LIVE_BYTES: live})
