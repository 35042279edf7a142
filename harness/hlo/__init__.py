"""Compiled HLO: parse it, find what runs and how often, and cost each op (`profiling.md`).

The public face of ``hlo_*``::

    module = parse_module(compiled.as_text())      # Module / Computation / Instruction
    executed(module)                               # [(instruction, executions per step)]
    schedule(module, renames)                      # [(name, opcode, computation)] in order
    category(module, instr)                        # one of schema.CATEGORIES
    to_desc(instr, module)                         # predictions.rules.OpDesc
    hlo_costs(text, "cpu")                         # predicted OPS table (schema.OPS_PREDICTED)
    module_totals(module), cross_check(module, compiled.cost_analysis())

Every malformed or truncated input raises :class:`HloParseError` (a ``HarnessError``).
"""
from harness.hlo.attrs import HloParseError, ReplicaGroups
from harness.hlo.category import category
from harness.hlo.cost import (
    compute_dtype,
    cross_check,
    cross_check_skip,
    hlo_costs,
    instruction_cost,
    module_totals,
)
from harness.hlo.desc import to_desc
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.parse import parse_module
from harness.hlo.walk import (
    TripCount,
    executed,
    fused_instructions,
    schedule,
    trip_count,
)
from predictions.rules import CONTAINERS, STRUCTURAL  # the opcode sets the HLO layer uses

__all__ = [
    "HloParseError", "ReplicaGroups", "Computation", "Instruction", "Module", "TripCount",
    "CONTAINERS", "STRUCTURAL", "parse_module", "executed", "schedule", "trip_count",
    "fused_instructions", "category",
    "to_desc", "instruction_cost", "compute_dtype", "hlo_costs", "module_totals", "cross_check",
    "cross_check_skip",
]
