"""Every collective explained (``harness explain``): where it came from, over which mesh axes,
why the book says it exists and what to change (``table.collectives``); and the work a layout
repeats over an axis (``redundant``)."""
from __future__ import annotations

import logging
from collections.abc import Mapping

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.explain.table import collectives
from harness.measure.programs import compilations, module_for

log = logging.getLogger(__name__)

__all__ = ["collectives", "for_run"]


def _mesh_of(meshes: Mapping | None, key: tuple[str, str], mesh: dict | None) -> dict | None:
    """The mesh matched to compilation ``key``; a mapping keyed by program name alone is
    read so too (older callers)."""
    meshes = meshes or {}
    return meshes.get(tuple(key)) or meshes.get(key[0]) or mesh


def for_run(modules: Mapping, ops: pd.DataFrame, step: dict | None,
            mesh: dict[str, int] | None, main: tuple[str, str] = ("", ""),
            program_meshes: Mapping[tuple[str, str], dict[str, int]] | None = None,
            system=None, arguments: Mapping[str, list[str] | Mapping[str, str]] | None = None
            ) -> pd.DataFrame:
    """The COLLECTIVES table of every compilation a run reports (``ops``' programs and program
    ids), each from its own parsed module (``modules``: (name, program id) -> Module) and its
    own ops' times, its axes named after the mesh matched to that compilation
    (``program_meshes[(name, program id)]``, ``harness.explain.meshes``), else ``mesh``; its
    parameters named after ``arguments[name]`` where JAX left them unnamed (the capture's
    ``harness.capture.arguments.argument_paths``); the step object (``step``) is of the step
    program ``main`` alone; on ``system`` (a ``predictions.network`` System) each reason
    names the network level that binds it. An explanation that fails is logged and that
    program left out, never the run."""
    tables = []
    for key in compilations(ops):
        module = module_for(modules, key)
        if module is None:
            continue
        try:
            tables.append(collectives(module, mesh=_mesh_of(program_meshes, key, mesh),
                                      ops=ops, program_id=key[1],
                                      step=step if key == tuple(main) else None,
                                      system=system, names=(arguments or {}).get(key[0])))
        except HarnessError as e:
            log.warning("cannot explain the collectives of %s(%s): %s", *key, e)
    tables = [t for t in tables if len(t)]
    if not tables:
        return pd.DataFrame(columns=list(schema.COLLECTIVES))
    return pd.concat(tables, ignore_index=True).sort_values(
        [schema.EXPOSED_COMM_S, schema.MEASURED_S, schema.PREDICTED_S], ascending=False,
        na_position="last", kind="stable").reset_index(drop=True)
