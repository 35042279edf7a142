"""The device ids of each group a collective combines, from its replica groups in any of XLA's
three forms (``harness.hlo.attrs.replica_groups``): what ``predictions.levels`` prices at the
network levels the groups cross, and what ``harness.explain.axes`` maps to mesh axes.

Partition ``i`` is the ``i``-th device of the mesh in row-major order
(``jax.sharding.Mesh.devices.flat``), so a mesh form's groups are its mesh laid out row-major.
"""
from __future__ import annotations

import math

import numpy as np

from harness.hlo.ir import Instruction, Module

Groups = tuple[tuple[int, ...], ...]


def _mesh_form(groups) -> Groups | None:
    """Device ids of each group of a ``mesh[...] {axes}`` form: the HLO's own mesh laid out
    row-major, every axis it names varying in one group (None where it names sub-axes)."""
    names = [n for n, _ in groups.mesh]
    if any(a not in names for a in groups.axes):
        return None
    ids = np.arange(math.prod(s for _, s in groups.mesh)).reshape([s for _, s in groups.mesh])
    inner = [names.index(a) for a in groups.axes]
    outer = [k for k in range(len(names)) if k not in inner]
    flat = ids.transpose(outer + inner).reshape(-1, groups.group_size)
    return tuple(tuple(int(d) for d in g) for g in flat)


def device_groups(instr: Instruction, module: Module) -> Groups | None:
    """The device ids of each group the collective combines; ((0..n-1),) for "every device";
    a permute's (source, target) pairs; None where they cannot be told."""
    groups = instr.attrs.get("replica_groups")
    if groups is None:
        pairs = instr.attrs.get("source_target_pairs")
        return tuple(tuple(p) for p in pairs) if pairs else None
    if groups.kind == "all":
        return (tuple(range(module.num_devices)),)
    if groups.kind == "mesh":
        return _mesh_form(groups)
    return groups.groups


def replica_groups(instr: Instruction, module: Module) -> Groups | None:
    """``device_groups`` of a collective with replica groups (None for a permute's pairs)."""
    return device_groups(instr, module) if "replica_groups" in instr.attrs else None
