"""Routed matmuls: an MoE's per-expert matmuls priced at what they compute, the routed FLOPs
beside them and the waste named (issue 54; book §5.4: FLOPs follow the active parameters, 2 ·
tokens · k · D · F per expert matmul forward).

Found from what the compiled program shows, not from names:

- ``ragged``: a ``ragged-dot`` (``jax.lax.ragged_dot``, before the TPU compiler turns it into
  its kernel) or a grouped-matmul kernel (libtpu's ``ragged-dot-*``, megablox's ``gmm``): every
  row meets only its own group's weights, 2·m·k·n whatever the split; what it computes is what
  was routed (rows past the group sizes' sum, if any, are not known from the HLO).
- ``dense over every expert``: a dot one of whose operands is a masked broadcast over G groups
  (``select(mask, broadcast(x), 0)``: ``ragged_dot`` lowered densely, as XLA:CPU and libtpu's
  weight gradient do): every row multiplied by all G experts' weights, G x the routed FLOPs.
- ``padded capacity``: a per-expert (batched) matmul reached from an MoE dispatch all-to-all
  (``dataflow.expert_role``): it computes every one of the E·C slots, C = capacity · T·k/E,
  the routed copies T·k (T: the tokens the dispatch einsum contracts on this device; k: the
  router's ``TopK`` width) and the padding alike.

Columns: ``harness.schema.routed`` (``schema.ROUTED``); ``harness explain`` prints the table
under the collectives (``harness.runs.explained``).
"""
from __future__ import annotations

import math

import pandas as pd

from harness import schema
from harness.explain import dataflow
from harness.explain.site import PASS, dot_in, forward_users
from harness.hlo.cost import instruction_cost
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.source import source_line
from harness.hlo.walk import async_done, executed

# the columns (``harness.schema.routed``), named here too for callers of this module
FORM, ROUTED_FLOPS, WASTE, ROUTED = schema.FORM, schema.ROUTED_FLOPS, schema.WASTE, schema.ROUTED

FORMS = {
    "ragged": "each row meets only its expert's weights (ragged_dot, a grouped matmul): what "
              "it computes is what was routed",
    "dense over every expert": "every row multiplied by every expert's weights and masked "
                               "(ragged_dot lowered densely): G x the routed FLOPs",
    "padded capacity": "every one of the E·C capacity slots computed, the routed T·k copies "
                       "and the padding alike: capacity x the routed FLOPs",
}


def _masked_groups(name: str, comp: Computation, module: Module, hops: int = 4) -> int:
    """G where ``name``'s value is a masked broadcast over G groups (a select of a broadcast
    that adds dimensions, alone or in a fusion, through ops that move it); 0 otherwise."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return 0
    inner = module.computation(instr.called("calls")[0]).instructions \
        if instr.opcode == "fusion" else [instr]
    for select in (i for i in inner if i.opcode == "select"):
        body = module.computation(select.computation)
        for data in select.operand_names[1:]:
            b = body.by_name.get(data)
            while b is not None and b.opcode == "fusion":  # a nested fusion: its root
                b = module.computation(b.called("calls")[0]).root
            if b is not None and b.opcode == "broadcast" and b.operand_shapes and \
                    b.operand_shapes[0][0].elements > 1:
                kept = b.attrs.get("dimensions", ())
                added = [d for k, d in enumerate(b.shapes[0].dims) if k not in kept]
                if added and math.prod(added) > 1:
                    return math.prod(added)
    if instr.opcode in PASS - {"fusion"} and instr.operand_names:
        return _masked_groups(instr.operand_names[0], comp, module, hops - 1)
    return 0


def _top_k(module: Module) -> int:
    """k of the router's top-k (the last dimension of a ``TopK`` call's result); 0 if none."""
    for comp in module.computations.values():
        for i in comp.instructions:
            if i.opcode == "custom-call" and "topk" in str(i.attrs.get("custom_call_target",
                                                                         "")).lower():
                return i.shapes[0].dims[-1] if i.shapes and i.shapes[0].dims else 0
    return 0


def _tokens(a2a: Instruction, module: Module, hops: int = 6) -> int:
    """T: the contracted size of the dispatch einsum (``td,tec->ecd``) whose result the
    dispatch all-to-all sends, through ops that move or slice it; 0 where none is found."""
    comp = module.computation(a2a.computation)
    todo = list(a2a.operand_names)
    for _ in range(hops * max(1, len(todo))):
        if not todo:
            break
        instr = comp.by_name.get(todo.pop(0))
        dot = dot_in(instr, module) if instr is not None else None
        if dot is not None and dot.operand_shapes:
            lhs = dot.operand_shapes[0][0].dims
            return math.prod(lhs[d] for d in dot.attrs.get("lhs_contracting_dims", ()))
        if instr is not None and (instr.opcode in PASS or instr.opcode in ("slice",)):
            todo += list(instr.operand_names[:1])
    return 0


def _slots(a2a: Instruction, module: Module) -> float:
    """E·C: the dispatch buffer's elements over its last dimension D."""
    leaves = [s for s in a2a.operand_leaves if s.dims]
    return sum(s.elements for s in leaves) / leaves[0].dims[-1] if leaves else 0.0


def _experts_after(a2a: Instruction, module: Module) -> dict[str, float]:
    """The per-expert matmuls a dispatch feeds (its first, and those that read their results:
    W_in then W_out), each op's name -> the share of its FLOPs that was routed (T·k / E·C;
    NaN where T or k is unknown)."""
    comp = module.computation(a2a.computation)
    tokens, k, slots = _tokens(a2a, module), _top_k(module), _slots(a2a, module)
    share = tokens * k / slots if tokens and k and slots else math.nan
    start = (async_done(module, a2a) if a2a.opcode.endswith("-start") else a2a) or a2a
    found, todo, seen = {}, [start], set()
    while todo:
        for user in forward_users(module, comp, todo.pop().name):
            if user.name in seen or dataflow.expert_role(user, module):
                continue
            seen.add(user.name)
            if dataflow.expert_dot(user, module) is not None:
                found[user.name] = share
                todo.append(user)
            elif user.opcode in PASS and dot_in(user, module) is None:
                todo.append(user)
    return found


def _row(instr: Instruction, module: Module, count: int, form: str, routed: float) -> dict:
    """One row; ``routed``: the routed FLOPs of one execution (NaN where unknown)."""
    flops = instruction_cost(instr, module).flops * count
    return {schema.OP: instr.name, schema.SOURCE_LINE: source_line(instr, module),
            schema.SOURCE_OP: instr.op_name, FORM: form, schema.COUNT: count,
            schema.FLOPS: flops, ROUTED_FLOPS: routed * count,
            WASTE: 1.0 - routed * count / flops if flops and not math.isnan(routed) else math.nan}


def routed_matmuls(module: Module) -> pd.DataFrame:
    """``ROUTED``: each routed matmul of the program (module docstring) with its FLOPs per
    step as computed, the routed FLOPs and the waste (1 − routed / computed)."""
    run = list(executed(module))
    padded: dict[str, float] = {}
    for instr, _ in run:
        if dataflow.expert_role(instr, module) == "dispatch":
            padded.update(_experts_after(instr, module))
    rows = []
    for instr, count in run:
        comp = module.computation(instr.computation)
        flops = instruction_cost(instr, module).flops
        if dataflow.ragged(instr):
            row = _row(instr, module, count, "ragged", flops)
            if row[schema.FLOPS] > 0:  # not the kernel's bookkeeping call
                rows.append(row)
        elif instr.name in padded:
            rows.append(_row(instr, module, count, "padded capacity",
                             padded[instr.name] * flops))
        elif dot_in(instr, module) is not None and instr.opcode in ("dot", "convolution",
                                                                     "fusion"):
            dot = dot_in(instr, module)
            inner = module.computation(dot.computation)
            G = max([_masked_groups(n, comp, module) for n in instr.operand_names] +
                    [_masked_groups(n, inner, module) for n in dot.operand_names[:2]])
            if G > 1:  # the dot's own FLOPs over G: the masking around it routed nothing
                rows.append(_row(instr, module, count, "dense over every expert",
                                 instruction_cost(dot, module).flops / G))
    return pd.DataFrame(rows, columns=list(ROUTED))
