"""What the simulated step moves off the core: the async pairs, the links they travel on, and
each op's time at the roofline (``harness.step.simulate``).

``transfers``: every ``-start`` -> ``-done`` pair of the module (``predictions.rules
.ASYNC_PAIRS`` through ``walk.async_done``) and every TPU collective chain's start fusion ->
done fusion (``harness.hlo.tpu.chain_pairs``). ``LINK_RULES``: which transfers share a link
(the choice is argued in ``simulate``'s docstring). ``roofline_durations``: ``core_s`` and
``transfer_s`` from ``hlo_costs``' table, each op at its predicted time.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

import pandas as pd

from harness import schema
from harness.hlo import tpu
from harness.hlo.category import category
from harness.hlo.ir import Instruction, Module
from harness.hlo.spaces import HOST, crosses_host, operand_spaces
from harness.hlo.walk import async_done, executed, fused_instructions
from predictions.rules import ASYNC_PAIRS, C_COLLECTIVE, COLLECTIVE_OPCODES


@dataclass(frozen=True)
class TransferOps:
    """``done_of``: start name -> its done's; ``start_of``: the reverse; ``chains``: the
    starts that are TPU chain start fusions (their work is both core time and a transfer)."""

    done_of: Mapping[str, str]
    start_of: Mapping[str, str]
    chains: frozenset


def transfers(module: Module) -> TransferOps:
    """Every async pair and TPU collective chain that runs (module docstring), worked out
    once per module."""
    if module.derived.transfers:
        return module.derived.transfers[0]
    done_of, chains, seen = {}, set(), set()
    for instr, _ in executed(module):
        if instr.opcode in ASYNC_PAIRS and _moves_data(module, instr):
            done = async_done(module, instr)
            if done is not None:
                done_of[instr.name] = done.name
        if instr.opcode == "fusion" and instr.computation not in seen:
            seen.add(instr.computation)
            pairs = tpu.chain_pairs(module, instr.computation)
            done_of.update(pairs)
            chains.update(pairs)
    found = TransferOps(done_of, {d: s for s, d in done_of.items()}, frozenset(chains))
    module.derived.transfers.append(found)
    return found


def _moves_data(module: Module, start: Instruction) -> bool:
    """Whether an async start sends data over a link (a collective, a copy, a send or recv),
    rather than running compute beside the core's (XLA:GPU's ``fusion-start`` on a second
    stream): at the roofline such compute shares the chip's FLOP/s and bandwidth, so it is
    played on the core."""
    if start.opcode in ("copy-start", "send", "recv"):
        return True
    moving = _moving(module, start)
    return (category(module, start) == C_COLLECTIVE or moving.opcode in ("copy", "copy-start")
            or crosses_host(start, module) or crosses_host(moving, module))


def _moving(module: Module, instr: Instruction) -> Instruction:
    """The instruction whose attributes say what a transfer or collective moves: an async
    start's wrapped op, a fusion's collective (a TPU chain's or a collective fusion's)."""
    if instr.opcode == "async-start" and instr.called("calls"):
        return module.computation(instr.called("calls")[0]).root
    if instr.opcode == "fusion":
        inner = [i for i in fused_instructions(module, instr) if i.opcode in COLLECTIVE_OPCODES]
        return inner[0] if inner else instr
    return instr


def _groups_text(instr: Instruction) -> str:
    groups = instr.attrs.get("replica_groups")
    if groups is not None and not isinstance(groups, str) and groups.num_groups != 1 \
            and groups.kind != "all":
        over = f" (mesh axes {','.join(groups.axes)})" if groups.axes else ""
        if groups.groups:
            over = f" ({{{','.join(map(str, groups.groups[0]))}}}, ...)"
        return f"{groups.num_groups or 1} group(s) of {groups.group_size} devices{over}"
    pairs = instr.attrs.get("source_target_pairs")
    return f"{len(pairs)} source-target pairs" if pairs else "every device"


def _kind(module: Module, instr: Instruction) -> str:
    """"h2d"/"d2h" (a copy or slice over the host link, from or to host memory: PCIe carries
    each direction at full rate at once; libtpu offloads activations by async slices), "dma"
    (a copy between device memories), "ici" otherwise."""
    moving = _moving(module, instr)
    host = next((m for m in (moving, instr) if crosses_host(m, module)), None)
    if host is not None:
        return _direction(host, module)
    return "dma" if moving.opcode in ("copy-start", "copy-done", "copy") else "ici"


def _direction(moving: Instruction, module: Module) -> str:
    """"d2h" where host memory is written, "h2d" where it is read: a dynamic-update-slice
    writes its update into the buffer that is its operand 0, so that buffer's space tells; a
    copy or slice reads its operands."""
    if moving.opcode.startswith("dynamic-update-slice") and moving.operand_names:
        buffer = module.computation(moving.computation).by_name.get(moving.operand_names[0])
        return "d2h" if buffer is not None and HOST in buffer.memory_spaces else "h2d"
    return "h2d" if HOST in operand_spaces(moving, module) else "d2h"


_ABOUT = {"h2d": "copies from host memory", "d2h": "copies to host memory",
          "dma": "copies between device memories"}


def _devices(module: Module, moving: Instruction) -> Hashable:
    """The device groups a collective links, in one form however XLA printed them."""
    groups = moving.attrs.get("replica_groups")
    if groups is not None and not isinstance(groups, str):
        if groups.kind == "all" or groups.num_groups == 1:  # one group: every device
            return "every device"
        if groups.groups is not None:
            return tuple(sorted(tuple(sorted(g)) for g in groups.groups))
        # mesh form (not expanded): the spanned axes of the mesh, axes of size 1 dropped
        return tuple((a, n) for a, n in groups.mesh if n > 1), groups.axes
    pairs = moving.attrs.get("source_target_pairs")
    if pairs and not isinstance(pairs, str):
        return "pairs", tuple(sorted(tuple(p) for p in pairs))
    return str(groups or pairs or "every device")


def by_groups(module: Module, instr: Instruction) -> tuple[Hashable, str]:
    """Transfers over the same device groups share a link; copies share one DMA lane, or one
    host-link lane per direction."""
    kind = _kind(module, instr)
    if kind != "ici":
        return kind, _ABOUT[kind]
    moving = _moving(module, instr)
    return ("ici", _devices(module, moving)), f"collectives over {_groups_text(moving)}"


def shared(module: Module, instr: Instruction) -> tuple[Hashable, str]:
    """Every collective on one link; copies as ``by_groups`` puts them."""
    kind = _kind(module, instr)
    return kind, _ABOUT.get(kind, "every collective")


def parallel(module: Module, instr: Instruction) -> tuple[Hashable, str]:
    """Every transfer on a link of its own: nothing queues."""
    return (_kind(module, instr), instr.name), f"{instr.name} alone"


# link rule name -> (module, instruction) -> (lane key: its kind, or a tuple led by its kind;
# what the lane carries)
LINK_RULES: dict[str, Callable[[Module, Instruction], tuple[Hashable, str]]] = {
    "groups": by_groups, "shared": shared, "parallel": parallel,
}


@dataclass(frozen=True)
class Durations:
    """One execution's times by HLO name: ``core_s`` on the core, ``transfer_s`` in flight
    (keyed by each pair's start)."""

    core_s: Mapping[str, float]
    transfer_s: Mapping[str, float]


def roofline_durations(module: Module, predicted: pd.DataFrame) -> Durations:
    """Every modeled op at its predicted time per execution (``predicted_s / count``), from
    ``hlo_costs(module, chip)``'s table: an async pair's time (on whichever half carries it,
    ``hlo_costs(async_on=...)``) as its transfer, its halves taking no core time; a TPU chain's
    start fusion holds the core for its compute and memory terms and sends its
    communication term as the transfer. Unmodeled ops are left out (``simulate`` counts
    them)."""
    pairs = transfers(module)
    core, flight = {}, {}
    rows = predicted[predicted[schema.BOUND] != schema.UNMODELED]
    for name, count, p_s, tc, tm, tk in zip(
            rows[schema.OP], rows[schema.COUNT], rows[schema.PREDICTED_S],
            rows[schema.T_COMPUTE_S], rows[schema.T_MEMORY_S], rows[schema.T_COMM_S]):
        if count <= 0:
            continue
        per = p_s / count
        if name in pairs.chains:
            overhead = per - max(tc, tm, tk) / count  # the chip's fixed cost per op
            core[name] = max(tc, tm) / count + overhead
            flight[name] = flight.get(name, 0.0) + tk / count
        elif name in pairs.done_of or name in pairs.start_of:
            start = pairs.start_of.get(name, name)
            core[name] = 0.0
            flight[start] = flight.get(start, 0.0) + per
        else:
            core[name] = per
    return Durations(core, flight)
