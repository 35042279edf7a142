"""The network a command prices collectives on past one GPU node or TPU slice (docs/networks.md):
what the user declares (``--system``, ``--sharp``, ``--nodes``, ``--gpus-per-node``,
``--slices``; a trace or a program cannot show them) made into a ``predictions.network.System``.

- GPUs: the named system (default the chip's, ``network.DEFAULT_SYSTEMS``) priced on the
  chosen chip; ``--gpus-per-node`` resizes its NVLink domain (every level's span scales with
  it, as ``network._fat_tree`` builds them: a leaf stays 32 nodes); ``--nodes`` alone takes
  the GPUs per node from the program's devices; SHARP on with ``--sharp``.
- TPUs: ``--slices S``: ``network.tpu_slices(chip, devices / S, S)``, slices joined by DCN.

``resolve(declared(args), chip, devices)`` gives None where nothing was declared: collectives
are then priced inside one node or slice, as before. Every bad combination is one
``HarnessError`` line naming the valid choices.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import HarnessError
from predictions import hardware, network
from predictions.hardware import Chip
from predictions.network import System

GPU_FLAGS = ("system", "sharp", "nodes", "gpus_per_node")


@dataclass(frozen=True)
class Declared:
    """The flags as given (None: not given)."""

    system: str | None = None
    sharp: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    slices: int | None = None

    @property
    def given(self) -> bool:
        return any(v is not None for v in dataclasses.astuple(self))


def declared(args) -> Declared:
    """The network flags of a command's parsed ``args`` (``harness.commands.add_network``)."""
    return Declared(*(getattr(args, f.name, None) for f in dataclasses.fields(Declared)))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def named(d: Declared, c: Chip) -> System:
    """The GPU system declared (``--system``, else the chip's), priced on ``c``."""
    name = d.system or network.DEFAULT_SYSTEMS.get(c.name)
    if name is None:
        raise HarnessError(f"no network is registered for {c.name} past one node; give "
                           f"--system ({', '.join(network.SYSTEMS)})")
    try:
        s = network.system(name)
    except KeyError as e:
        raise HarnessError(f"--system {name}: {e.args[0]}") from None
    return s if s.chip.name == c.name else dataclasses.replace(s, chip=c)


def _per_node(d: Declared, s: System, devices: int | None) -> int:
    """GPUs per node: as given, else the program's devices over ``--nodes``, else the
    system's own NVLink domain."""
    if d.gpus_per_node is not None:
        per = d.gpus_per_node
    elif d.nodes is not None and devices:
        if devices % d.nodes:
            raise HarnessError(f"--nodes {d.nodes} does not divide the program's {devices} "
                               f"devices; give --gpus-per-node too")
        per = devices // d.nodes
    else:
        per = s.domain
    if d.nodes is not None and devices and d.nodes * per != devices:
        raise HarnessError(f"--nodes {d.nodes} x {per} GPUs per node = {d.nodes * per} GPUs; "
                           f"the program runs on {devices}")
    return per


def with_node_size(s: System, per: int) -> System:
    """``s`` with ``per`` GPUs in each node: every level's span scaled by per / domain (the
    fat tree's leaf stays 32 nodes, its uplinks the nodes' egress)."""
    if per == s.domain:
        return s
    old = s.domain
    levels = tuple(dataclasses.replace(lv, span=lv.span * per // old if lv.span else 0)
                   for lv in s.levels)
    return dataclasses.replace(s, levels=levels,
                               description=f"{s.description}; declared {per} GPUs per node")


def _gpu(d: Declared, c: Chip, devices: int | None) -> System:
    if d.slices is not None:
        raise HarnessError(f"--slices is for TPU slices over DCN; {c.name} is a GPU: give "
                           f"--nodes (and --gpus-per-node)")
    s = with_node_size(named(d, c), _per_node(d, named(d, c), devices))
    return network.with_sharp(s, d.sharp) if d.sharp else s


def _tpu(d: Declared, c: Chip, devices: int | None) -> System:
    wrong = [_flag(k) for k in GPU_FLAGS if getattr(d, k) is not None]
    if wrong:
        raise HarnessError(f"{', '.join(wrong)}: GPU networks only; a {c.name} job is declared "
                           f"with --slices N (TPU slices over DCN)")
    S = d.slices or 1
    if not devices or devices % S:
        raise HarnessError(f"--slices {S} does not divide the program's {devices or 0} devices")
    try:
        return network.tpu_slices(c, devices // S, S)
    except ValueError as e:
        raise HarnessError(f"--slices {S}: {e}") from None


# chip kind -> how a declared network is built for it (a CPU trace names a GPU system)
BUILDERS: dict[str, Callable[[Declared, Chip, int | None], System]] = {
    "gpu": _gpu, "cpu": _gpu, "tpu": _tpu}


def resolve(d: Declared, chip: Chip | str | None, devices: int | None) -> System | None:
    """The declared network for ``chip`` and a program of ``devices`` devices; None when
    nothing was declared."""
    if not d.given:
        return None
    if chip is None:
        raise HarnessError("a network (--system, --nodes, --slices) prices collectives on a "
                           "chip: give --chip")
    c = hardware.chip_entry(chip)
    return BUILDERS[c.kind](d, c, devices)


def describe(s: System) -> str:
    """One line: the system and its levels ("dgx-h100-superpod: node 8 x 450 GB/s, ...")."""
    parts = [f"{lv.name} {lv.span or 'all'} chips, {lv.bytes_per_s / 1e9:g} GB/s per {lv.child}"
             for lv in s.levels]
    sharp = f"; SHARP {s.sharp.speedup:g}x ({s.sharp.basis})" if s.sharp else ""
    return f"network {s.name} on {s.chip.name}: {'; '.join(parts)}{sharp} (docs/networks.md)"
