"""What runs, and how often: while-loop trip counts, the executed-instruction walk, fusion bodies.

The trace names ops by the instructions of the entry computation and of the computations it
runs through control flow (while bodies, ``call``, conditional branches) — `profiling.md`: the
"XLA Ops" row lists HLO instruction names. Instructions inside a fusion, or inside a reduction's
``to_apply``, do not run as separate ops; a fusion is costed from its body instead.

Trip counts: ``backend_config={"known_trip_count":{"n":"5"}}`` when XLA proved it; otherwise the
condition's induction pattern ``compare(get-tuple-element(param, k), constant(N)), direction=LT``
(possibly wrapped in a fusion), with the initial value from the loop's init tuple and the step
from the body's ``add(get-tuple-element(param, k), constant(s))``. Unknown: counted once, with
a warning. A body runs ``n`` times, its condition ``n + 1`` (the CPU backend skips evaluating the
condition of a loop with a known trip count, so those rows may have no trace events). Every
branch of a ``conditional`` is counted as taken: an upper bound.

``while``/``call``/``conditional`` themselves are containers: on CPU their trace events enclose
the events of the ops they run.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.hlo.attrs import HloParseError
from harness.hlo.ir import Computation, Instruction, Module
from predictions.rules import ASYNC_PAIRS, STRUCTURAL

log = logging.getLogger(__name__)

MAX_TRIPS = 1 << 40  # beyond this a "trip count" is a misread, not a loop that runs in a step
# Looked through when tracing a loop bound or step back to its constant.
_TRANSPARENT = frozenset({"copy", "convert", "bitcast", "reshape", "broadcast"})
_WAITS = frozenset({*ASYNC_PAIRS.values(), "async-update"})  # what consumes an async start


@dataclass(frozen=True)
class TripCount:
    """``n``: iterations per execution of the loop;
    ``source``: "backend_config" | "induction" | "unknown"."""

    n: int
    source: str


def _int_literal(instr: Instruction) -> int | None:
    text = instr.literal.strip()
    if text in ("true", "false"):
        return int(text == "true")
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def _through(comp: Computation, instr: Instruction | None) -> Instruction | None:
    """Follow copies/converts/bitcasts back to the value's source (bounded: malformed text may
    name an instruction as its own operand)."""
    for _ in range(16):
        if instr is None or instr.opcode not in _TRANSPARENT or not instr.operand_names:
            return instr
        instr = comp.by_name.get(instr.operand_names[0])
    return None


def _constant(comp: Computation, name: str) -> int | None:
    instr = _through(comp, comp.by_name.get(name))
    return _int_literal(instr) if instr is not None and instr.opcode == "constant" else None


def _tuple_index(comp: Computation, name: str) -> int | None:
    """k when ``name`` is get-tuple-element(<the computation's parameter>, index=k)."""
    instr = _through(comp, comp.by_name.get(name))
    if instr is None or instr.opcode != "get-tuple-element":
        return None
    src = comp.by_name.get(instr.operand_names[0]) if instr.operand_names else None
    return instr.attrs.get("index") if src is not None and src.opcode == "parameter" else None


def _unwrap(module: Module, comp: Computation, instr: Instruction,
            opcode: str) -> tuple[Computation, Instruction, dict[str, str]] | None:
    """``instr`` if it has ``opcode``; or a fusion whose root has it, with the fusion's
    parameter names mapped to its operands in ``comp``."""
    if instr.opcode == opcode:
        return comp, instr, {}
    if instr.opcode != "fusion" or not instr.called("calls"):
        return None
    body = module.computation(instr.called("calls")[0])
    if body.root is None or body.root.opcode != opcode:
        return None
    params = {p.name: instr.operand_names[int(p.literal)] for p in body.instructions
              if p.opcode == "parameter" and int(p.literal) < len(instr.operand_names)}
    return body, body.root, params


def _binary(module: Module, comp: Computation, instr: Instruction | None, opcode: str
            ) -> tuple[Instruction, tuple, tuple] | None:
    """``instr``, or the root of the fusion it is, when it is ``opcode`` of two operands (the
    loop's compare, the step's add): that instruction and, for each operand, its (tuple index,
    constant), looking through the fusion to its operands in ``comp``; None otherwise."""
    found = _unwrap(module, comp, instr, opcode) if instr is not None else None
    if found is None or len(found[1].operand_names) != 2:
        return None
    inner, op, mapping = found
    where = [(comp, mapping[n]) if n in mapping else (inner, n) for n in op.operand_names]
    a, b = ((_tuple_index(c, n), _constant(c, n)) for c, n in where)
    return op, a, b


def _induction(module: Module, loop: Instruction, parent: Computation) -> int | None:
    cond = module.computation(loop.called("condition")[0])
    found = _binary(module, cond, cond.root, "compare")
    if found is None:
        return None
    cmp, (ka, ca), (kb, cb) = found
    direction = cmp.attrs.get("direction", "")
    if ka is not None and cb is not None:
        k, bound = ka, cb
    elif kb is not None and ca is not None:  # constant on the left: flip the comparison
        k, bound = kb, ca
        direction = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction)
    else:
        return None
    if k < 0:
        return None
    init_tuple = parent.by_name.get(loop.operand_names[0]) if loop.operand_names else None
    init = None
    if init_tuple is not None and init_tuple.opcode == "tuple" \
            and k < len(init_tuple.operand_names):
        init = _constant(parent, init_tuple.operand_names[k])
    step = _step(module, loop, k)
    if init is None or step is None or step == 0:
        return None
    span = {"LT": bound - init, "LE": bound - init + 1, "GT": init - bound,
            "GE": init - bound + 1, "NE": bound - init}.get(direction)
    if span is None:
        return None
    return max(0, -(-span // abs(step)))  # ceil, in integers


def _step(module: Module, loop: Instruction, k: int) -> int | None:
    body = module.computation(loop.called("body")[0])
    root = body.root
    if root is None or root.opcode != "tuple" or k >= len(root.operand_names):
        return None
    update = _through(body, body.by_name.get(root.operand_names[k]))
    found = _binary(module, body, update, "add")
    if found is None:
        return None
    _, (ka, ca), (kb, cb) = found
    if ka == k and cb is not None:
        return cb
    if kb == k and ca is not None:
        return ca
    return None


def trip_count(module: Module, loop: Instruction, parent: Computation | None = None) -> TripCount:
    """Iterations of one ``while`` instruction (module docstring)."""
    counts, key = module.derived.trip_counts, (loop.computation, loop.name)
    if key not in counts:
        counts[key] = _trip_count(module, loop, parent)
    return counts[key]


def _trip_count(module: Module, loop: Instruction, parent: Computation | None) -> TripCount:
    known = loop.backend_config().get("known_trip_count")
    if isinstance(known, dict):
        try:
            n = int(known.get("n"))
        except (TypeError, ValueError):
            n = None
        if n is not None and 0 <= n <= MAX_TRIPS:
            return TripCount(n, "backend_config")
    parent = parent or module.computation(loop.computation)
    n = _induction(module, loop, parent)
    if n is not None and n <= MAX_TRIPS:
        return TripCount(n, "induction")
    log.warning("while loop %s: trip count unknown; its body is counted once", loop.name)
    return TripCount(1, "unknown")


def _children(module: Module, comp: Computation, instr: Instruction, count: int,
              loops_once: bool) -> Iterator[tuple[str, int]]:
    """(computation, count) pairs whose instructions run as ops because ``instr`` runs
    ``count`` times."""
    if instr.opcode == "while":
        if loops_once:
            yield instr.called("condition")[0], count
            yield instr.called("body")[0], count
            return
        trips = trip_count(module, instr, comp).n
        yield instr.called("condition")[0], count * (trips + 1)  # checked once more than run
        yield instr.called("body")[0], count * trips
    elif instr.opcode == "call":
        yield instr.called("to_apply")[0], count
    elif instr.opcode == "conditional":
        # Every branch counted as if taken: an upper bound (the branch is chosen at run time).
        for attr in ("branch_computations", "true_computation", "false_computation"):
            for name in instr.called(attr):
                yield name, count


def executed(module: Module, *, loops_once: bool = False) -> list[tuple[Instruction, int]]:
    """Every instruction that runs as its own op, with executions per module run (trip counts
    multiplied through nested loops), in program order; structural ones included.
    ``loops_once``: count every loop body and condition once (as XLA's cost analysis does)."""
    if loops_once in module.derived.executed:
        return module.derived.executed[loops_once]
    out: list[tuple[Instruction, int]] = []
    active: set[str] = set()

    def walk(comp: Computation, count: int) -> None:
        if comp.name in active:
            raise HloParseError(f"line {comp.line}: computation {comp.name} calls itself")
        active.add(comp.name)
        for instr in comp.instructions:
            out.append((instr, count))
            for callee, n in _children(module, comp, instr, count, loops_once):
                walk(module.computation(callee), n)
        active.discard(comp.name)

    walk(module.entry, 1)
    module.derived.executed[loops_once] = out
    return out


def schedule(module: Module, renames: Mapping[str, str] | None = None
             ) -> list[tuple[str, str, str]]:
    """The module's ops in program order as (name, opcode, computation), each name as the trace
    gives it (``renames``: async-start -> the op it wraps, ``harness.trace.hlo_proto``): what
    the trace needs to place kernels that carry no op name of their own (GPU CUDA graphs)."""
    renames = renames or {}
    return [(renames.get(i.name, i.name), i.opcode, i.computation) for i, _ in executed(module)]


def fused_instructions(module: Module, fusion: Instruction) -> list[Instruction]:
    """The non-structural instructions inside a fusion, nested fusions flattened."""
    key = fusion.called("calls")
    if key in module.derived.fused:
        return module.derived.fused[key]
    out: list[Instruction] = []
    active: set[str] = set()

    def walk(name: str) -> None:
        if name in active:
            raise HloParseError(f"line {module.computation(name).line}: fused computation "
                                f"{name} contains itself")
        active.add(name)
        for instr in module.computation(name).instructions:
            if instr.opcode == "fusion" and instr.called("calls"):
                walk(instr.called("calls")[0])
            elif instr.opcode not in STRUCTURAL:
                out.append(instr)
        active.discard(name)

    for name in fusion.called("calls"):
        walk(name)
    module.derived.fused[key] = out
    return out


def async_done(module: Module, start: Instruction) -> Instruction | None:
    """The ``-done`` that waits for an async start (``all-gather-start`` -> ``all-gather-done``,
    ``send`` -> ``send-done``, an ``async-start`` through its ``async-update``s): the pairs of
    ``predictions.rules.ASYNC_PAIRS``."""
    want = ASYNC_PAIRS.get(start.opcode)
    if want is None:
        return None
    by_operand, key = module.derived.done, start.computation
    if key not in by_operand:
        by_operand[key] = {i.operand_names[0]: i for i in module.computation(key).instructions
                           if i.opcode in _WAITS and i.operand_names}
    step = start
    for _ in range(64):  # start -> update* -> done; bounded against malformed self-references
        step = by_operand[key].get(step.name)
        if step is None or step.opcode == want:
            return step
        if step.opcode != "async-update":
            return None
    return None


def async_start(module: Module, done: Instruction) -> Instruction | None:
    """The async start a ``-done`` waits for (``async_done`` backwards), or None."""
    comp, step = module.computation(done.computation), done
    for _ in range(64):
        step = comp.by_name.get(step.operand_names[0]) if step.operand_names else None
        if step is None or ASYNC_PAIRS.get(step.opcode) == done.opcode:
            return step
        if step.opcode != "async-update":
            return None
    return None
