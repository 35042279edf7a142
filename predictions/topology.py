"""Slice topology (tpus.md): which axes of a TPU slice wrap around, and how a mesh axis maps
onto a slice's physical torus axes. A chip names its rule (``Chip.wrap_rule``, a key into
``hardware.WRAP_RULES``)."""
from __future__ import annotations

import math
from collections.abc import Sequence

# the wrap rules live beside the Chip record that names them (hardware.WRAP_RULES)
from predictions.hardware import WRAP_RULES, Chip, chip_entry


def wraps(chip: Chip | str, axes: Sequence[int], slice_shape: Sequence[int] | None = None
          ) -> tuple[bool, ...]:
    """Whether each axis has a wraparound link, by the chip's topology rule."""
    c = chip_entry(chip)
    return WRAP_RULES[c.wrap_rule](c, tuple(axes), tuple(slice_shape) if slice_shape else None)


def check_axes(chip: Chip | str, axes: Sequence[int]) -> tuple[int, ...]:
    """Validate mesh axis sizes against the chip's largest ICI slice; return them as a tuple.

    Each physical axis must fit one dimension of the largest slice (sorted largest to largest).
    """
    c = chip_entry(chip)
    axes = tuple(axes)
    for n in axes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"axis sizes must be positive integers, got {axes!r}")
    if not c.max_slice:
        return axes
    live = sorted((n for n in axes if n > 1), reverse=True)
    dims = sorted(c.max_slice, reverse=True)
    shape = "x".join(map(str, c.max_slice))
    if len(live) > len(dims) or any(n > d for n, d in zip(live, dims)):
        raise ValueError(
            f"axes {'x'.join(map(str, axes))} do not fit {c.name}'s largest ICI slice {shape} "
            f"({math.prod(c.max_slice)} chips, at most {max(dims)} per axis, {len(dims)} axes); "
            f"beyond one slice chips talk over DCN")
    return axes


def physical_axes(chip: Chip | str, axes: Sequence[int]) -> tuple[int, ...]:
    """Lay mesh axes onto the slice's physical torus axes: axes that fit are kept; otherwise the
    group is split over the slice dimensions, largest first (sharding.md: a mesh axis may span
    several physical axes, M_X). ValueError when the group exceeds the largest slice."""
    c = chip_entry(chip)
    try:
        return check_axes(c, axes)
    except ValueError:
        pass
    remaining, out = math.prod(axes), []
    for d in sorted(c.max_slice, reverse=True):
        f = max(k for k in range(1, min(d, remaining) + 1) if remaining % k == 0)
        out.append(f)
        remaining //= f
    if remaining != 1:
        check_axes(c, axes)  # raises, naming the limit
    return tuple(n for n in out if n > 1) or (1,)


def spans(mesh: Sequence[int], topology: Sequence[int]) -> tuple[int, ...]:
    """Physical axes each mesh axis spans when the mesh is laid onto ``topology`` in order,
    each mesh axis taking the next physical axes (split where sizes demand, as
    ``jax.experimental.mesh_utils`` with ``allow_split_physical_axes``): 64x1 on 4x4x4 ->
    (3, 1), 16x4 -> (2, 1), 8x8 -> (2, 2). A mesh axis of size 1 counts 1. They scale the
    book's conditions (sharding.md: an axis spanning M physical axes has M times the links)."""
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
