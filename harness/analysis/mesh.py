"""A run's named mesh axes: from its meta (``run_mesh``) or as given on the command line
(``parse_mesh``: ``X=4,Y=2``, ``fsdp=4,model=2``, or ``4x2`` with the book's letters; the one
parser is ``predictions.mesh``). The analysis reads them for its notes (which parameter of a
recompiled step changed its layout), ``harness.explain`` to name the axes each collective runs
over.
"""
from __future__ import annotations

from collections.abc import Mapping

from harness import schema
from harness.errors import HarnessError
from predictions import mesh as meshes

BOOK_AXES = meshes.BOOK_AXES  # the book's mesh axis letters (`sharding.md`), as workloads.mesh


class MeshError(HarnessError):
    """A mesh given on the command line that is not like X=4,Y=2 or 4x2."""


def parse_mesh(text: str) -> dict[str, int]:
    """``"X=4,Y=2"`` -> {"X": 4, "Y": 2}; ``"4x2"`` -> the same, axes named X, Y, Z."""
    try:
        return meshes.parse_mesh(text).shape
    except meshes.MeshError as e:
        raise MeshError(f"--mesh {str(text).strip()!r}: {e.reason}") from None


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
