"""The mesh each program ran on, among the meshes a script built (``harness profile`` records
every one: ``harness.capture.meshes``, the run's ``schema.MESHES``).

A mesh fits a program when it has as many devices as the program has partitions and every
collective of the program combines devices along whole named axes of it (``axes.mesh_axes``:
partition ``i`` is the mesh's ``i``-th device in row-major order). Where meshes that fit name
its collectives' axes differently, those over the very devices the program ran on come first,
then the first built; the program's axes are named after that one, and a note names the others.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from harness import schema
from harness.explain.axes import device_groups, mesh_axes
from harness.explain.table import collective_kind
from harness.hlo.ir import Module
from harness.hlo.walk import executed


def recorded(meta: Mapping) -> list[dict]:
    """The meshes a run recorded ({"axes": {name: size}, "devices": [...]}); [] for none."""
    found = meta.get(schema.MESHES)
    return [m for m in found if isinstance(m, Mapping) and isinstance(m.get("axes"), Mapping)
            ] if isinstance(found, list) else []


def mesh_text(axes: Mapping) -> str:
    """{"data": 4, "model": 2} -> "data=4,model=2" (as ``--mesh`` takes it)."""
    return ",".join(f"{k}={v}" for k, v in axes.items())


def _collective_axes(module: Module, axes: dict[str, int]) -> tuple | None:
    """Each collective's axes on the mesh ``axes``, in program order; None when one of them
    combines devices along no whole axes of it."""
    out = []
    for instr, _ in executed(module):
        if not collective_kind(instr):
            continue
        groups = device_groups(instr, module)
        found = mesh_axes(groups, axes, pairs="replica_groups" not in instr.attrs) \
            if groups else ()
        if found is None:
            return None
        out.append(found)
    return tuple(out)


def _fitting(module: Module, meshes: list[dict]) -> list[tuple[dict, tuple]]:
    """(mesh, its names of the collectives' axes) of each mesh that fits ``module``."""
    out = []
    for mesh in meshes:
        axes = {str(k): int(v) for k, v in mesh["axes"].items()}
        if math.prod(axes.values()) != module.num_devices:
            continue
        named = _collective_axes(module, axes)
        if named is not None:
            out.append((mesh, named))
    return out


def program_meshes(modules: Mapping, meta: Mapping, events: pd.DataFrame | None = None
                   ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """(program name -> the named axes of the mesh it ran on, notes) for every program in
    ``modules`` ((name, program id) -> Module) that one of the run's recorded meshes fits.
    ``events``: the run's EVENTS, whose devices per program break ties."""
    meshes = recorded(meta)
    if not meshes:
        return {}, []
    ran_on: dict[str, set] = {}
    if events is not None and len(events):
        ran_on = {str(k): set(v.tolist()) for k, v in
                  events.groupby(schema.PROGRAM, observed=True)[schema.DEVICE].unique().items()}
    chosen, notes = {}, []
    for (name, _), module in modules.items():
        if name in chosen:
            continue
        fits = _fitting(module, meshes)
        if not fits:
            continue
        fits.sort(key=lambda f: set(f[0].get("devices", ())) != ran_on.get(name))  # stable
        chosen[name] = dict(fits[0][0]["axes"])
        others = [m for m, named in fits[1:] if named != fits[0][1]]
        if others:
            notes.append(f"{name}: its collectives fit {len(others) + 1} of the meshes the "
                         f"script built; their axes are named after "
                         f"{mesh_text(fits[0][0]['axes'])}, not "
                         f"{'; '.join(mesh_text(m['axes']) for m in others)}")
    return chosen, notes
