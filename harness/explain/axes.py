"""The mesh axes a collective runs over: its device groups mapped to the run's named axes.

In compiled (post-SPMD) HLO a collective names devices by partition id, and partition ``i``
is the ``i``-th device of the mesh in row-major order (``jax.sharding.Mesh.devices.flat``;
``workloads.mesh.make_mesh`` builds meshes so). So on a mesh {X: 4, Y: 2} device ``i`` sits at
(X, Y) = (i // 2, i % 2): the group {0, 2, 4, 6} varies X alone and runs over axis X, the
group {0, 1} over Y (`sharding.md`: AllGather_X combines the devices along X).
The groups come in XLA's three forms (``harness.hlo.groups.device_groups``); a permute's
(source, target) pairs run over the axes along which a source and its target differ.
"""
from __future__ import annotations

import math

import numpy as np

from harness.hlo.groups import device_groups  # noqa: F401 (re-exported)
from harness.hlo.ir import Instruction, Module


def _coords(ids, shape: tuple[int, ...]) -> np.ndarray:
    return np.stack(np.unravel_index(np.asarray(ids), shape), axis=-1)


def mesh_axes(groups, mesh: dict[str, int], *, pairs: bool = False) -> tuple[str, ...] | None:
    """The named axes the groups span on ``mesh`` (row-major partition ids), in mesh order;
    None when they are not whole axes of it (a group that mixes part of an axis, a device id
    beyond the mesh). ``pairs``: the groups are a permute's (source, target) pairs."""
    names, shape = list(mesh), tuple(mesh.values())
    if not groups or max(max(g) for g in groups) >= math.prod(shape):
        return None
    varying: set[int] = set()
    for g in groups:
        c = _coords(g, shape)
        moved = {k for k in range(len(shape)) if len(set(c[:, k])) > 1}
        if not pairs and (len(set(g)) != math.prod(shape[k] for k in moved) or
                          varying and moved != varying):
            return None
        varying |= moved
    return tuple(names[k] for k in sorted(varying))


def describe(instr: Instruction, module: Module, mesh: dict[str, int] | None) -> str:
    """The collective's mesh axes as text: "X", "X,Y"; "" for a collective within one device;
    without a mesh (or groups that are no whole axes of it) its device groups, the first two
    and how many: "{0,2,4,6} {1,3,5,7}" or "{0,1} {2,3} ... (4 groups)"."""
    groups = device_groups(instr, module)
    if groups is None:
        return "?"
    is_permute = "replica_groups" not in instr.attrs
    if mesh:
        axes = mesh_axes(groups, mesh, pairs=is_permute)
        if axes is not None:
            return ",".join(axes)
    shown = " ".join("{" + ",".join(map(str, g)) + "}" for g in groups[:2])
    what = "pairs" if is_permute else "groups"
    return shown + (f" ... ({len(groups)} {what})" if len(groups) > 2 else "")


def shift_axis(pairs, mesh: dict[str, int] | None) -> str:
    """The one named axis along which every (source, target) pair of a permute moves a device
    by one position, from every position of the axis but at most one (a ring, wrapping or a
    chain, either direction: a pipeline's stage-to-stage hand-off); "" where the pairs do
    otherwise or no mesh is known."""
    if not pairs or not mesh or max(max(p) for p in pairs) >= math.prod(mesh.values()):
        return ""
    shape = tuple(mesh.values())
    src, dst = _coords([p[0] for p in pairs], shape), _coords([p[-1] for p in pairs], shape)
    moved = {k for k in range(len(shape)) if (src[:, k] != dst[:, k]).any()}
    if len(moved) != 1:
        return ""
    (k,) = moved
    n = shape[k]
    step = {int(d) % n for d in dst[:, k] - src[:, k]}
    every = len(set(src[:, k].tolist())) >= n - 1  # each stage sends (a chain: all but the last)
    return list(mesh)[k] if every and len(step) == 1 and step <= {1, n - 1} else ""
