"""The layouts ``harness plan`` tries, and where each mesh axis lies on the slice.

A layout is an entry of the one registry (``predictions.layouts.LAYOUTS``, which the workloads
turn into partition specs) on a mesh X x Y over the N chips: X the devices over its data and
FSDP axes, Y over its model axes. Each entry sizes its axes (``Layout.sizes``): data and FSDP
put every chip on X, tensor parallelism every chip on Y, FSDP + TP splits them at the book's
optimum (training.md §6.2: X_opt = sqrt((B/F) * (M_X/M_Y) * N), rounded to a power of two).
M_X and M_Y, how many physical torus axes each mesh axis spans, come from laying the mesh onto
the slice (``spans``); they scale the book's conditions (sharding.md: an axis spanning M
physical axes has M times the links).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import HarnessError
from predictions import layouts as registry
from predictions.topology import spans  # noqa: F401 (re-exported: harness.plan.spans)

# the one registry of layouts; plan tries registry.planned() unless told
LAYOUTS = registry.LAYOUTS


@dataclass(frozen=True)
class Candidate:
    """One layout: the registry's layout on mesh X x Y, and the physical axes each mesh
    axis spans (M_X, M_Y)."""

    layout: str
    X: int
    Y: int
    M_X: int
    M_Y: int
    note: str = ""

    @property
    def mesh(self) -> str:
        return f"{self.X}x{self.Y}"


def check_layouts(names: Sequence[str]) -> list[str]:
    """The layouts asked for (those the registry plans by default when none), HarnessError
    naming the valid: a registered layout plan cannot size yet (the pipelined ones) too."""
    for name in names:
        try:
            registry.layout(name)
        except ValueError as e:
            raise HarnessError(str(e)) from None
        if not registry.layout(name).sized:
            valid = [n for n, e in registry.LAYOUTS.items() if e.sized]
            raise HarnessError(f"layout {name}: harness plan cannot size it yet (it runs with "
                               f"harness run); valid: {', '.join(valid)}")
    return list(dict.fromkeys(names)) or registry.planned()


def candidates(names: Sequence[str], F: float, tokens: float, topology: Sequence[int]
               ) -> list[Candidate]:
    """One ``Candidate`` per layout name on the ``prod(topology)`` chips."""
    out = []
    for name in check_layouts(names):
        entry = registry.layout(name)
        try:
            sizes, note = registry.role_sizes(entry, F, tokens, topology)
        except ValueError as e:
            raise HarnessError(f"layout {name}: {e}") from None
        X = math.prod(n for r, n in sizes.items() if r != "model")
        Y = sizes.get("model", 1)
        m_x, m_y = spans((X, Y), topology)
        out.append(Candidate(name, X, Y, m_x, m_y, note))
    return out
