"""The layouts ``harness plan`` tries, and where each mesh axis lies on the slice.

A layout is a parallelism of the workload (``workloads.llama.sharding.PARALLELISMS``) on a mesh
shape X x Y over the N chips: data and FSDP put every chip on X, tensor parallelism every chip
on Y, FSDP + TP splits them at the book's optimum (training.md §6.2: X_opt = sqrt((B/F) *
(M_X/M_Y) * N), rounded to a power of two, ``predictions.training.fsdp_tp_split``).
M_X and M_Y, how many physical torus axes each mesh axis spans, come from laying the mesh onto
the slice (``spans``); they scale the book's conditions (sharding.md: an axis spanning M
physical axes has M times the links).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.errors import HarnessError
from predictions import training


@dataclass(frozen=True)
class Candidate:
    """One layout: the workload's parallelism on mesh X x Y, and the physical axes each mesh
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


def spans(mesh: Sequence[int], topology: Sequence[int]) -> tuple[int, ...]:
    """Physical axes each mesh axis spans when the mesh is laid onto ``topology`` in order,
    each mesh axis taking the next physical axes (split where sizes demand, as
    ``jax.experimental.mesh_utils`` with ``allow_split_physical_axes``): 64x1 on 4x4x4 ->
    (3, 1), 16x4 -> (2, 1), 8x8 -> (2, 2). A mesh axis of size 1 counts 1."""
    left = [d for d in topology if d > 1]
    out = []
    for n in mesh:
        m = 0
        for i, d in enumerate(left):
            if n == 1:
                break
            g = math.gcd(n, d)
            if g > 1:
                n, left[i], m = n // g, d // g, m + 1
        out.append(max(m, 1))
    return tuple(out)


def _split(F: float, tokens: float, n: int, topology: Sequence[int]) -> tuple[int, int, str]:
    """FSDP x TP at the book's X_opt: M_X/M_Y depend on the split, so the split is made with
    the spans of the previous guess until it stops moving; X stays within [2, N/2] so the
    layout mixes both (at the ends it is pure FSDP or pure TP, tried on their own)."""
    X, Y, axes = 1, n, (1, 1)
    for _ in range(4):
        X, Y = training.fsdp_tp_split(F, tokens, n, axes)
        new = spans((X, Y), topology)
        if new == axes:
            break
        axes = new
    note = ""
    if X < 2 or X > n // 2:
        x_opt = training.fsdp_tp_optimum(F, tokens, n, axes)
        X = min(max(X, 2), n // 2)
        Y = n // X
        note = f"X_opt={x_opt:,.0f} clamped to X={X} (a mix of both)"
    return X, Y, note


# layout -> (F, tokens, N chips, topology) -> (X, Y, note); sharding.PARALLELISMS names them
LAYOUTS: dict[str, Callable[[float, float, int, Sequence[int]], tuple[int, int, str]]] = {
    "dp": lambda F, tokens, n, topo: (n, 1, ""),
    "fsdp": lambda F, tokens, n, topo: (n, 1, ""),
    "tp": lambda F, tokens, n, topo: (1, n, ""),
    "fsdp_tp": _split,
}


def check_layouts(names: Sequence[str]) -> list[str]:
    """The layouts asked for (all of ``LAYOUTS`` when none), HarnessError naming the valid."""
    for name in names:
        if name not in LAYOUTS:
            raise HarnessError(f"unknown layout {name!r}; valid: {', '.join(LAYOUTS)}")
    return list(dict.fromkeys(names)) or list(LAYOUTS)


def candidates(names: Sequence[str], F: float, tokens: float, topology: Sequence[int]
               ) -> list[Candidate]:
    """One ``Candidate`` per layout name on the ``prod(topology)`` chips."""
    n = math.prod(topology)
    out = []
    for name in check_layouts(names):
        X, Y, note = LAYOUTS[name](F, tokens, n, topology)
        m_x, m_y = spans((X, Y), topology)
        out.append(Candidate(name, X, Y, m_x, m_y, note))
    return out
