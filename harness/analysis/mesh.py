"""A run's named mesh axes: from its meta (``run_mesh``) or as given on the command line
(``parse_mesh``: ``X=4,Y=2``, or ``4x2`` with the book's letters). The analysis reads them for
its notes (which parameter of a recompiled step changed its layout), ``harness.explain`` to name
the axes each collective runs over.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from harness import schema
from harness.errors import HarnessError

BOOK_AXES = ("X", "Y", "Z")  # the book's mesh axis letters (`sharding.md`), as workloads.mesh
_NAMED_RE = re.compile(r"([A-Za-z_]\w*)=(\d+)")


class MeshError(HarnessError):
    """A mesh given on the command line that is not like X=4,Y=2 or 4x2."""


def parse_mesh(text: str) -> dict[str, int]:
    """``"X=4,Y=2"`` -> {"X": 4, "Y": 2}; ``"4x2"`` -> the same, axes named X, Y, Z."""
    text = text.strip()
    parts = [p.strip() for p in text.split(",") if p.strip()]
    named = [_NAMED_RE.fullmatch(p) for p in parts]
    if parts and all(named):
        mesh = {m.group(1): int(m.group(2)) for m in named}
        if len(mesh) != len(parts):
            raise MeshError(f"--mesh {text!r}: an axis is named twice")
    else:
        dims = text.lower().split("x")
        if not all(d.isdigit() for d in dims) or len(dims) > len(BOOK_AXES):
            raise MeshError(f"--mesh {text!r}: expected named axes like X=4,Y=2 or a shape like "
                            f"4x2 (axes named {', '.join(BOOK_AXES)})")
        mesh = dict(zip(BOOK_AXES, (int(d) for d in dims)))
    if any(v < 1 for v in mesh.values()):
        raise MeshError(f"--mesh {text!r}: every axis needs a size >= 1")
    return mesh


def run_mesh(meta: Mapping) -> dict[str, int] | None:
    """The run's named mesh axes from its meta ({"X": 4, "Y": 2}; a "4x2" string gets the
    book's axis names); None where it has none."""
    mesh = meta.get(schema.MESH)
    if isinstance(mesh, Mapping) and mesh:
        return {str(k): int(v) for k, v in mesh.items()}
    if isinstance(mesh, str) and mesh:
        try:
            return parse_mesh(mesh)
        except HarnessError:
            return None
    return None
