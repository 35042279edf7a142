"""An HLO sharding attribute read against a named mesh: per dimension of an array, the mesh axes
it is split over (``sharding={devices=[4,2]<=[8]}`` on a {"data": 4, "model": 2} mesh: the
first dimension over ``data``, the second over ``model``). The redundant-work view
(``harness.explain.redundant``) and the recompile notes (``harness.analysis.recompiles``) read
shardings this way.
"""
from __future__ import annotations

import math
import re

_TILED_RE = re.compile(r"devices=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def _ints(text: str | None) -> list[int]:
    return [int(t) for t in text.split(",")] if text else []


def split_axes(sharding: str, rank: int, mesh: dict[str, int]) -> list[set[str]] | None:
    """Per dimension of an array, the mesh axes its ``sharding`` splits it over; None for a
    form this cannot map onto ``mesh`` (a device list, a mesh of other sizes)."""
    if "replicated" in sharding:
        return [set() for _ in range(rank)]
    m = _TILED_RE.search(sharding)
    names, sizes = list(mesh), list(mesh.values())
    if m is None:
        return None
    tile, reshape, perm = _ints(m.group(1)), _ints(m.group(2)), _ints(m.group(3))
    if reshape == [math.prod(sizes)] and not perm:
        reshape = sizes  # a flat iota is the mesh in row-major order
    if reshape != sizes:
        return None
    order = [names[p] for p in (perm or range(len(names)))]
    out, k = [], 0
    for t in tile:
        taken: set[str] = set()
        while math.prod(mesh[a] for a in taken) < t and k < len(order):
            taken.add(order[k])
            k += 1
        if math.prod(mesh[a] for a in taken) != t:
            return None
        out.append(taken)
    return out[:rank] if len(out) >= rank else None
