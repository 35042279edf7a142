"""Mesh strings, parsed in one place: ``--mesh`` of every command, a sweep's ``mesh``, a
collective's axes, a slice's topology.

A mesh is its axes by name and size, in order: ``fsdp=4,model=2`` (axes named by their role in
a layout, ``predictions.layouts.ROLES``), ``X=4,Y=2`` (the book's letters, or the names a
script gave its mesh). The book's shape ``4x2`` (``8``, ``2x2x2``; ``*`` for ``x`` too) is still
read: its axes by position, named with the book's letters X, Y, Z (`sharding.md`).

    parse_mesh("fsdp=4,model=2").shape    -> {"fsdp": 4, "model": 2}
    parse_mesh("4x2").shape               -> {"X": 4, "Y": 2}   (positional)
    parse_dims("4x4x4")                   -> (4, 4, 4)           (a shape only: a topology)

Stdlib only, like all of ``predictions``: the workloads, the harness and the predictions import
it. Bad text raises ``MeshError`` (a ValueError) naming the forms it takes.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BOOK_AXES: tuple[str, ...] = ("X", "Y", "Z")  # the book's mesh axis letters (sharding.md)
FORMS = "axes by name and size like fsdp=4,model=2 or X=4,Y=2, or a shape like 4x2"
_NAMED = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*(\S+?)\s*")
_SHAPE = re.compile(r"\s*\d+(\s*[xX*]\s*\d+)*\s*")


class MeshError(ValueError):
    """Mesh text that is none of the forms; ``text`` is what was given, ``reason`` why not."""

    def __init__(self, text: object, reason: str):
        self.text, self.reason = text, reason
        super().__init__(f"mesh {text!r}: {reason}")


@dataclass(frozen=True)
class Mesh:
    """Named axes in order, ``((name, size), ...)``; ``positional`` when given as a shape
    (``4x2``), its names then the book's letters by position."""

    axes: tuple[tuple[str, int], ...]
    positional: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.axes)

    @property
    def shape(self) -> dict[str, int]:
        """Axis name -> size, in order (as ``jax.sharding.Mesh.shape``)."""
        return dict(self.axes)

    @property
    def size(self) -> int:
        """Devices in the mesh."""
        return math.prod(self.dims)

    def __str__(self) -> str:
        """``4x2`` for a positional mesh, ``fsdp=4,model=2`` for a named one."""
        if self.positional:
            return shape_str(self.dims)
        return ",".join(f"{n}={s}" for n, s in self.axes)


def shape_str(dims: Sequence[int]) -> str:
    """``(4, 2)`` -> ``"4x2"``."""
    return "x".join(str(d) for d in dims)


def _size(text: object, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise MeshError(text, f"{value!r} is not a whole number; give {FORMS}") from None
    if n < 1:
        raise MeshError(text, f"every axis needs a size >= 1; give {FORMS}")
    return n


def mesh_label(shape: Mapping[str, int]) -> str:
    """A mesh as runs and reports name it (``Mesh.shape``, a stored run's meta): axes named by
    the book's letters in order as the shape (``{"X": 4, "Y": 2}`` -> ``4x2``), axes named
    otherwise by name (``fsdp=4,model=2``: their roles say what they hold); "" for none."""
    if tuple(shape) == BOOK_AXES[:len(shape)]:
        return shape_str(list(shape.values()))
    return ",".join(f"{n}={s}" for n, s in shape.items())


def parse_dims(text: str | int | Sequence[int]) -> tuple[int, ...]:
    """A shape: ``"4x2"`` -> (4, 2), ``8`` -> (8,), a sequence passes (checked). MeshError
    for anything else (named axes included: a shape has none)."""
    if isinstance(text, bool):
        raise MeshError(text, f"not a size; give {FORMS}")
    if isinstance(text, int):
        return (_size(text, str(text)),)
    if isinstance(text, str):
        if not _SHAPE.fullmatch(text):
            raise MeshError(text, "not a shape like 8, 4x2 or 2x2x2")
        return tuple(_size(text, d) for d in re.split(r"[xX*]", text.replace(" ", "")))
    try:
        dims = tuple(text)
    except TypeError:
        raise MeshError(text, f"not a shape; give {FORMS}") from None
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise MeshError(text, f"sizes must be whole numbers; give {FORMS}")
    return tuple(_size(text, str(d)) for d in dims)


def parse_mesh(text: str | int | Sequence[int] | Mapping[str, int] | Mesh) -> Mesh:
    """The one mesh parser: named axes (``fsdp=4,model=2``, ``X=4,Y=2``), a shape (``4x2``,
    positional, the book's letters) or a mapping name -> size (a stored run's meta)."""
    if isinstance(text, Mesh):
        return text
    if isinstance(text, Mapping):
        return Mesh(tuple((str(k), _size(text, str(v))) for k, v in text.items()))
    if not isinstance(text, str) or _SHAPE.fullmatch(text):
        dims = parse_dims(text)
        if len(dims) > len(BOOK_AXES):
            raise MeshError(text, f"{len(dims)} axes by position; name them (a=2,b=2,...), the "
                                  f"book's letters cover {', '.join(BOOK_AXES)}")
        return Mesh(tuple(zip(BOOK_AXES, dims)), positional=True)
    parts = [p for p in text.split(",") if p.strip()]
    named = [_NAMED.fullmatch(p) for p in parts]
    if not parts or not all(named):
        raise MeshError(text, f"give {FORMS}")
    axes = tuple((m.group(1), _size(text, m.group(2))) for m in named)
    names = [n for n, _ in axes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise MeshError(text, f"axis {', '.join(twice)} is named twice")
    return Mesh(axes)
