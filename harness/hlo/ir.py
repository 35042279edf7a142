"""The parsed form of an HLO module: :class:`Module` -> :class:`Computation` ->
:class:`Instruction`.

Shapes are ``predictions.rules.Shape`` (per device, post-SPMD; tuples flattened to leaves).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from harness.hlo.attrs import HloParseError
from predictions.rules import Shape

_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


@dataclass(slots=True)
class Instruction:
    """One HLO instruction. ``shapes``: result leaves (a tuple result lists each leaf).

    ``operand_shapes``: per operand, its result leaves (filled when the module is resolved).
    ``attrs``: attribute values, parsed for the names in ``hlo_attrs.PARSERS``, raw text otherwise.
    ``literal``: the text inside ``parameter(...)``/``constant(...)``.
    """

    name: str
    opcode: str
    shapes: tuple[Shape, ...]
    memory_spaces: tuple[int, ...]
    operand_names: tuple[str, ...]
    attrs: dict
    line: int
    computation: str
    is_root: bool = False
    literal: str = ""
    operand_shapes: tuple[tuple[Shape, ...], ...] = ()

    @property
    def operand_leaves(self) -> tuple[Shape, ...]:
        """Every operand's result leaves, in operand order (``operand_shapes`` flattened)."""
        return tuple(s for leaves in self.operand_shapes for s in leaves)

    @property
    def op_name(self) -> str:
        """``metadata={op_name="jit(f)/dot_general"}`` -> "jit(f)/dot_general" ("" if absent)."""
        m = _OP_NAME_RE.search(self.attrs.get("metadata", ""))
        return m.group(1) if m else ""

    def backend_config(self) -> dict:
        """The JSON ``backend_config`` as a dict; {} when absent or not JSON."""
        raw = self.attrs.get("backend_config", "")
        try:
            if raw.startswith('"'):
                raw = json.loads(raw)
            value = json.loads(raw) if raw.startswith("{") else {}
        except (ValueError, TypeError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}

    def called(self, attr: str) -> tuple[str, ...]:
        """Names of the computations an attribute (``calls``, ``body``, ...) refers to."""
        return self.attrs.get(attr, ())


@dataclass(slots=True)
class Computation:
    """Instructions in printed order (a topological order); ``root`` is the ``ROOT`` one, or the
    last when none is marked."""

    name: str
    is_entry: bool
    line: int
    instructions: list[Instruction] = field(default_factory=list)
    by_name: dict[str, Instruction] = field(default_factory=dict)
    root: Instruction | None = None


@dataclass(slots=True)
class Derived:
    """What is worked out from a module once and looked up after: indexes, not data. Each
    field has one owner, the function that fills it."""

    index: dict = field(default_factory=dict)        # name -> Instruction (Module.instruction)
    trip_counts: dict = field(default_factory=dict)  # (computation, loop) -> walk.trip_count
    executed: dict = field(default_factory=dict)     # loops_once -> walk.executed
    fused: dict = field(default_factory=dict)        # called computations -> fused_instructions
    done: dict = field(default_factory=dict)         # computation -> {start: waiter} (async_done)
    users: dict = field(default_factory=dict)        # computation -> {name: users} (fusion_desc)
    costs: dict = field(default_factory=dict)        # (computation, name) -> instruction_cost
    chain_roles: dict = field(default_factory=dict)  # fusion -> role in a TPU chain (hlo.tpu)
    scatters: dict = field(default_factory=dict)     # fusion -> tpu.all_reduce_scatter
    transfers: list = field(default_factory=list)    # [its TransferOps] (step.transfers)
    frames: dict = field(default_factory=dict)       # stack frame id -> Frame (hlo.source)
    routing: dict = field(default_factory=dict)      # "top_k" -> has one (explain.dataflow)


@dataclass(slots=True)
class Module:
    """``name`` is the program name the trace uses (``jit_train_step``); ``scheduled``: the
    header says ``is_scheduled=true`` (each computation is printed in the order XLA runs it).
    ``blocks``: the source-location blocks printed before the computations (``FileNames``,
    ``FunctionNames``, ``FileLocations``, ``StackFrames``), name -> their lines
    (``harness.hlo.source`` reads them)."""

    name: str
    computations: dict[str, Computation]
    entry: Computation
    num_partitions: int = 1
    replica_count: int = 1
    scheduled: bool = False
    blocks: dict[str, list[str]] = field(default_factory=dict)
    derived: Derived = field(default_factory=Derived)

    @property
    def num_devices(self) -> int:
        return self.num_partitions * self.replica_count

    def computation(self, name: str) -> Computation:
        try:
            return self.computations[name]
        except KeyError:
            raise HloParseError(f"no computation named {name!r}") from None

    def instruction(self, name: str) -> Instruction:
        """An instruction by name. Names are unique in compiled modules; in hand-written text
        that reuses one across computations, the first definition wins."""
        index = self.derived.index
        if not index:
            for comp in self.computations.values():
                for instr in comp.instructions:
                    index.setdefault(instr.name, instr)
        try:
            return index[name]
        except KeyError:
            raise HloParseError(f"no instruction named {name!r} in module {self.name}") from None

