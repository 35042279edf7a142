"""A compiled program's signature: the parameters of its entry computation, in the order the
program takes them, each with the name the trace gives it, its dtype, shape and sharding.

Two compilations of one jitted function differ in their signatures when an argument's shape,
dtype or sharding changed between calls (``jax.jit`` compiles once per distinct signature).
The compiled (post-SPMD) HLO gives each parameter's per-device shape and its sharding
annotation (``sharding={devices=[4,1,2]<=[8] last_tile_dim_replicate}``); the whole array's
shape is the per-device one times the tiles of each dimension. JAX names an entry parameter
by its argument in the metadata ``op_name`` (``x``, ``params['w1']``,
``model.states[0][1]``); ``user_name`` names it as the user's code does, by the paths a
capture recorded (``schema.ARGUMENT_PATHS``) where JAX's name does not say.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.hlo.ir import Module

_TILES_RE = re.compile(r"devices=\[([\d,]+)\]")
_ESCAPED = re.compile(r"\\(.)")  # the HLO text escapes quotes in a name: params[\'w1\']
_PLACEHOLDER = re.compile(r"^Arg_(\d+)\.\d+$")  # JAX's name for an argument it could not name


@dataclass(frozen=True)
class Parameter:
    """One entry parameter: ``index`` (the program's argument number), ``name`` (its
    metadata op_name, "" where none), ``dtype``, ``dims`` (per device), ``sharding`` (the HLO
    annotation without braces, "" where none)."""

    index: int
    name: str
    dtype: str
    dims: tuple[int, ...]
    sharding: str

    @property
    def tiles(self) -> tuple[int, ...]:
        """The number of pieces each dimension is split into (1 for each when unsplit)."""
        m = _TILES_RE.search(self.sharding)
        found = tuple(int(t) for t in m.group(1).split(",")) if m else ()
        return found[:len(self.dims)] if len(found) >= len(self.dims) else (1,) * len(self.dims)

    @property
    def global_dims(self) -> tuple[int, ...]:
        """The whole array's shape: the per-device shape times the tiles (an unevenly split
        dimension, padded on the last device, reads a little large)."""
        return tuple(d * t for d, t in zip(self.dims, self.tiles))

    @property
    def split(self) -> bool:
        """Some dimension is split over devices."""
        return math.prod(self.tiles) > 1


def parameters(module: Module) -> list[Parameter]:
    """The entry computation's parameters, by index. A tuple-shaped parameter (rare in
    compiled JAX programs) is described by its first leaf."""
    out = []
    for instr in module.entry.instructions:
        if instr.opcode != "parameter" or not instr.shapes:
            continue
        try:
            index = int(instr.literal.strip())
        except ValueError:
            continue
        shape = instr.shapes[0]
        out.append(Parameter(index, _ESCAPED.sub(r"\1", instr.op_name), shape.dtype,
                             tuple(shape.dims),
                             str(instr.attrs.get("sharding", "")).strip().strip("{}")))
    return sorted(out, key=lambda p: p.index)


def user_name(index: int, recorded: str,
              names: Sequence[str] | Mapping[str, str] | None = None) -> str:
    """Entry parameter ``index``'s name in the user's code: its metadata name (``recorded``,
    unescaped), or for JAX's placeholder ``Arg_k.n`` the capture's path of argument ``k``
    (``names``); ``parameter <index>`` where neither says. ``names`` as a mapping (a profiled
    script's ``nnx.jit`` program, ``harness.capture.nnx_paths``) renames by the metadata name:
    ``model.states[0][3]`` -> ``model.linear1.kernel``."""
    recorded = _ESCAPED.sub(r"\1", recorded)
    if isinstance(names, Mapping):
        return names.get(recorded) or recorded or f"parameter {index}"
    m = _PLACEHOLDER.match(recorded)
    if names and (m or not recorded):
        k = int(m.group(1)) if m else index
        if 0 <= k < len(names) and names[k]:
            return names[k]
    return recorded or f"parameter {index}"
