"""Compiled (post-SPMD) HLO text -> :class:`Module` of computations and instructions.

Reads what ``jax.jit(f).lower(...).compile().as_text()`` prints (`profiling.md`: the HLO after
fusion and layout assignment, whose instruction names are the names the trace shows)::

    HloModule jit_f, entry_computation_layout={...}, num_partitions=8
    FileNames / FunctionNames / FileLocations / StackFrames blocks      (kept: hlo.source)
    %fused_computation (param_0: f32[512,128]) -> f32[512,256] {
      %param_0 = f32[512,128]{1,0} parameter(0)
      ROOT %dot.1 = f32[512,256]{1,0} dot(%param_0, ...), lhs_contracting_dims={1}, ...
    }
    ENTRY %main (...) -> ... { ... }

Shapes are per device. Layouts (``{1,0}``, ``{2,1,0:T(8,128)(2,1)S(1)}``) are dropped except the
memory space ``S(n)`` (`profiling.md`: S(1) = VMEM), kept in ``Instruction.memory_spaces``.
Tuples are flattened to their leaves. Malformed or truncated text raises :class:`HloParseError`
naming the line; the parser works line by line in linear time.
"""
from __future__ import annotations

import logging
import re

from harness.hlo import attrs as hlo_attrs
from harness.hlo.attrs import HloParseError
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.line import balanced, err, parse_instruction

log = logging.getLogger(__name__)

_MODULE_RE = re.compile(r"HloModule\s+([\w.\-]+)")
_PARTITIONS_RE = re.compile(r"\bnum_partitions=(\d+)")
_REPLICAS_RE = re.compile(r"\breplica_count=(\d+)")
_SCHEDULED_RE = re.compile(r"\bis_scheduled=true\b")
_BLOCK_RE = re.compile(r"[A-Z][A-Za-z]*")  # FileNames, FunctionNames, FileLocations, StackFrames
_COMP_RE = re.compile(r"(ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\)\s*->.*)?\{")

# Opcodes that must name exactly one computation per attribute.
REQUIRED_CALLS = {"while": ("condition", "body"), "fusion": ("calls",), "call": ("to_apply",)}

__all__ = ["HloParseError", "Computation", "Instruction", "Module", "parse_module"]


def _close(comp: Computation, lineno: int) -> None:
    if not comp.instructions:
        raise err(lineno, f"computation {comp.name} has no instructions")
    if comp.root is None:
        comp.root = comp.instructions[-1]


def _resolve(module: Module) -> None:
    """Operand shapes from their defining instructions; called computations must exist."""
    comps = module.computations
    for comp in comps.values():
        defs = comp.by_name
        for instr in comp.instructions:
            shapes = []
            for op in instr.operand_names:
                d = defs.get(op)
                if d is None:
                    raise err(instr.line, f"operand %{op} of %{instr.name} is not defined in "
                                           f"computation {comp.name}")
                shapes.append(d.shapes)
            instr.operand_shapes = tuple(shapes)
            for attr in REQUIRED_CALLS.get(instr.opcode, ()):
                if len(instr.attrs.get(attr, ())) != 1:
                    raise err(instr.line, f"expected {attr}=%<computation> on the "
                                           f"{instr.opcode} %{instr.name}")
            for attr in hlo_attrs.CALL_ATTRS:
                for callee in instr.attrs.get(attr, ()):
                    if callee not in comps:
                        raise err(instr.line, f"{attr}=%{callee} of %{instr.name} names no "
                                               "computation in this module")


def _header(line: str, lineno: int) -> tuple[str, int, int, bool]:
    """(name, partitions, replicas, scheduled) of the ``HloModule`` line."""
    m = _MODULE_RE.match(line)
    if m is None:
        raise err(lineno, "expected one header 'HloModule <name>, ...'", line)
    p, r = _PARTITIONS_RE.search(line), _REPLICAS_RE.search(line)
    return (m.group(1), int(p.group(1)) if p else 1, int(r.group(1)) if r else 1,
            _SCHEDULED_RE.search(line) is not None)


def _add(comp: Computation, instr: Instruction, lineno: int) -> None:
    """Append ``instr`` to ``comp``: its name once, its ROOT once."""
    if instr.name in comp.by_name:
        raise err(lineno, f"%{instr.name} is defined twice in {comp.name}")
    comp.instructions.append(instr)
    comp.by_name[instr.name] = instr
    if instr.is_root:
        if comp.root is not None:
            raise err(lineno, f"second ROOT in computation {comp.name}")
        comp.root = instr


def _unclosed(text: str, lineno: int, comp_name: str) -> None:
    """An instruction whose brackets or quotes never close: its own parse error, or this one."""
    parse_instruction(text, lineno, comp_name)
    raise err(lineno, "unbalanced brackets or quotes in an instruction", text[:200])


def parse_module(text: str) -> Module:
    """Parse a whole module; raises :class:`HloParseError` on malformed or truncated text."""
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}")
    name, partitions, replicas, scheduled = None, 1, 1, False
    comps: dict[str, Computation] = {}
    entry: Computation | None = None
    comp: Computation | None = None
    blocks: dict[str, list[str]] = {}
    block: list[str] | None = None
    lineno, pending, first = 0, "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if comp is not None:
            # an instruction may span lines: a Pallas kernel's frontend_attributes hold
            # ``kernel_metadata={`` and its JSON on lines of their own
            if pending:
                if line == "}" or line.startswith(("%", "ROOT")):  # it never closed
                    _unclosed(pending, first, comp.name)
                pending = f"{pending} {line}"
                if not balanced(pending):
                    continue
                line, pending = pending, ""
            elif line.startswith(("%", "ROOT")) and not balanced(line):
                pending, first = line, lineno
                continue
            if line == "}":
                _close(comp, lineno)
                comp = None
            elif line and not line.startswith("//"):
                _add(comp, parse_instruction(line, first or lineno, comp.name), lineno)
                first = 0
            continue
        if block is not None and line[:1].isdigit():
            block.append(line)
            continue
        block = None
        if not line or line.startswith("//"):
            continue
        if line.startswith("HloModule"):
            if name is not None:
                raise err(lineno, "expected one header 'HloModule <name>, ...'", line)
            name, partitions, replicas, scheduled = _header(line, lineno)
            continue
        if _BLOCK_RE.fullmatch(line):
            block = blocks.setdefault(line, [])
            continue
        m = _COMP_RE.fullmatch(line)
        if m is None:
            raise err(lineno, "expected a computation header '%name (...) -> ... {'", line)
        if name is None:
            raise err(lineno, "expected 'HloModule <name>' before the first computation")
        comp = Computation(m.group(2), bool(m.group(1)), lineno)
        if comp.name in comps:
            raise err(lineno, f"computation {comp.name} is defined twice")
        comps[comp.name] = comp
        if comp.is_entry:
            if entry is not None:
                raise err(lineno, f"second ENTRY computation {comp.name} (first: {entry.name})")
            entry = comp
    if pending:
        _unclosed(pending, first, comp.name if comp else "")
    if comp is not None:
        raise err(lineno, f"expected '}}' closing computation {comp.name} "
                           f"(opened on line {comp.line}); the text looks truncated")
    if entry is None:
        raise err(lineno, "expected an ENTRY computation; none found (truncated text?)")
    module = Module(name or "", comps, entry, partitions, replicas, scheduled, blocks=blocks)
    _resolve(module)
    log.debug("parsed HLO module %s: %d computations", module.name, len(comps))
    return module
