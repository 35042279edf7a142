"""The mesh each program ran on, among the meshes a script built (``harness profile`` records
every one: ``harness.capture.meshes``, the run's ``schema.MESHES``).

Each compilation is matched on its own (a script that compiles one function on a 4x2 mesh and
then on a 2x2 one has two compilations of one name, each on its mesh), by what the compiled
program says of its devices, never by its name alone: a mesh fits a compilation when it has as
many devices as the program has partitions, every entry parameter's sharding splits each
dimension into a product of some of the mesh's axis sizes, and every collective combines
devices along whole named axes of it (``axes.mesh_axes``: partition ``i`` is the mesh's
``i``-th device in row-major order). Where meshes that fit name its collectives' axes
differently, those over the very devices the compilation ran on come first, then the first
built; its axes are named after that one, and a note names the others.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from harness import schema
from harness.explain.axes import device_groups, mesh_axes
from harness.explain.fused import collective_op
from harness.explain.table import collective_kind
from harness.hlo.ir import Module
from harness.hlo.signature import parameters
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
        if not collective_kind(instr, module):
            continue
        groups = device_groups(collective_op(instr, module), module)
        found = mesh_axes(groups, axes, pairs="replica_groups" not in
                          collective_op(instr, module).attrs) \
            if groups else ()
        if found is None:
            return None
        out.append(found)
    return tuple(out)


def _products(sizes: list[int]) -> set[int]:
    """Every product of a subset of the axis sizes (1 for none)."""
    out = {1}
    for n in sizes:
        out |= {p * n for p in out}
    return out


def _shardings_fit(module: Module, axes: dict[str, int]) -> bool:
    """Every entry parameter splits each dimension into a product of some axis sizes."""
    made = _products(list(axes.values()))
    return all(t in made for p in parameters(module) for t in p.tiles)


def _fitting(module: Module, meshes: list[dict]) -> list[tuple[dict, tuple]]:
    """(mesh, its names of the collectives' axes) of each mesh that fits ``module``."""
    out = []
    for mesh in meshes:
        axes = {str(k): int(v) for k, v in mesh["axes"].items()}
        if math.prod(axes.values()) != module.num_devices or \
                not _shardings_fit(module, axes):
            continue
        named = _collective_axes(module, axes)
        if named is not None:
            out.append((mesh, named))
    return out


def _devices_run(events: pd.DataFrame | None) -> dict[tuple[str, str], set]:
    """(program, program id) -> the devices its ops ran on (program id "" where the events
    name none), from a run's EVENTS."""
    if events is None or not len(events):
        return {}
    keys = [c for c in (schema.PROGRAM, schema.PROGRAM_ID) if c in events.columns]
    out = {}
    for key, devices in events.groupby(keys, observed=True)[schema.DEVICE].unique().items():
        key = key if isinstance(key, tuple) else (key,)
        out[(str(key[0]), str(key[1]) if len(key) > 1 else "")] = set(devices.tolist())
    return out


def program_meshes(modules: Mapping, meta: Mapping, events: pd.DataFrame | None = None
                   ) -> tuple[dict[tuple[str, str], dict[str, int]], list[str]]:
    """((program name, program id) -> the named axes of the mesh that compilation ran on,
    notes) for every compilation in ``modules`` ((name, program id) -> Module) that one of the
    run's recorded meshes fits. ``events``: the run's EVENTS, whose devices per compilation
    (per program name where they name no id) break ties."""
    meshes = recorded(meta)
    if not meshes:
        return {}, []
    ran_on = _devices_run(events)
    chosen, notes = {}, []
    for key, module in modules.items():
        fits = _fitting(module, meshes)
        if not fits:
            continue
        ran = ran_on.get((key[0], str(key[1]))) or ran_on.get((key[0], ""))
        fits.sort(key=lambda f: set(f[0].get("devices", ())) != ran)  # stable
        chosen[key] = dict(fits[0][0]["axes"])
        others = [m for m, named in fits[1:] if named != fits[0][1]]
        if others:
            notes.append(f"{_named(key, modules)}: its collectives fit {len(others) + 1} of the "
                         f"meshes the script built; their axes are named after "
                         f"{mesh_text(fits[0][0]['axes'])}, not "
                         f"{'; '.join(mesh_text(m['axes']) for m in others)}")
    return chosen, notes


def _named(key: tuple[str, str], modules: Mapping) -> str:
    """The program's name, with its id where the run holds several compilations of it."""
    several = sum(1 for k in modules if k[0] == key[0]) > 1
    return f"{key[0]}({key[1]})" if several and key[1] else key[0]
