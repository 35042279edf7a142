"""The meshes a profiled script builds (``harness profile``): each ``jax.sharding.Mesh`` over more
than one device, as it is made, by its named axes and sizes and its device ids in mesh order
(row-major ``mesh.devices.flat``: partition ``i`` of a program laid out on it is the ``i``-th,
``harness.explain.axes``). ``jax.make_mesh`` and Flax's meshes are ``Mesh`` objects too.

Kept in the run's meta as ``schema.MESHES``; ``harness.explain.meshes`` names each program's
collective axes after the recorded mesh its device groups fit. Standard library only at import:
the script's process imports jax when the script does (``harness.capture.segments``).
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

AXES, DEVICES = "axes", "devices"  # the keys of one recorded mesh


def describe(mesh) -> dict:
    """One mesh as the run records it: {"axes": {name: size}, "devices": [id, ...]}."""
    return {AXES: {str(k): int(v) for k, v in dict(mesh.shape).items()},
            DEVICES: [int(d.id) for d in mesh.devices.flat]}


class MeshLog:
    """The distinct meshes of more than one device made since ``watch``, first made first."""

    def __init__(self):
        self.meshes: list[dict] = []
        self._lock = threading.Lock()

    def record(self, mesh) -> None:
        try:
            if mesh.size <= 1:
                return
            found = describe(mesh)
        except Exception as e:  # noqa: BLE001 - never the script's failure
            log.debug("mesh not recorded: %s", e)
            return
        with self._lock:
            if found not in self.meshes:
                self.meshes.append(found)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.meshes)

    def watch(self, mesh_type) -> None:
        """Record every mesh ``mesh_type`` (``jax.sharding.Mesh``) makes from now on: its
        constructor is wrapped, the mesh it returns left as it is."""
        make = mesh_type.__new__

        def new(cls, *args, **kwargs):
            mesh = make(cls, *args, **kwargs)
            self.record(mesh)
            return mesh

        mesh_type.__new__ = staticmethod(new)
