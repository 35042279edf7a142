"""Device meshes: named by the book's letters (`sharding.md`: axes X, Y, Z) or by the roles
their axes play in a layout (``fsdp=4,model=2``, ``predictions.layouts``). Mesh text is parsed
once, by ``predictions.mesh.parse_mesh``: named axes (``fsdp=4,model=2``, ``X=4,Y=2``) keep
their names, a shape (``4x2``) takes the workload's axis names by position.

- ``make_mesh("4x2")`` builds a concrete ``jax.sharding.Mesh`` over the live devices, checking
  that the shape uses exactly the devices there are (or a prefix, with ``allow_subset=True``).
- ``build_args`` gives a build's arguments: abstract shapes with their shardings, or host arrays
  placed on the mesh (``put``).
- ``abstract_mesh("8x8")`` builds a ``jax.sharding.AbstractMesh``: no devices needed. A workload
  built on it with ``abstract=True`` can be *lowered* (``lower_abstract``) to StableHLO for any
  device count, but in jax 0.10 an executable (post-SPMD HLO) needs concrete devices:
  ``Lowered.compile()`` on an AbstractMesh lowering fails with "device_assignment cannot be None",
  and ``jax.experimental.topologies`` has no CPU topology. For compiled HLO of a big mesh, run
  in a process with that many virtual CPU devices: ``workloads.aot.compile_in_subprocess``.

Workloads use Auto axis types by default, so XLA's SPMD partitioner chooses the collectives from
the operands' shardings (the book's "automatic" mode, `jax-stuff.md`); jax 0.10's
``jax.make_mesh`` would otherwise default to Explicit axes.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from predictions import mesh as mesh_text
from workloads.base import WorkloadError, check_choice

BOOK_AXES: tuple[str, ...] = mesh_text.BOOK_AXES
AXIS_TYPES: dict[str, AxisType] = {
    "auto": AxisType.Auto, "explicit": AxisType.Explicit, "manual": AxisType.Manual,
}
AnyMesh = Mesh | AbstractMesh


def parse_shape(shape: str | int | Sequence[int]) -> tuple[int, ...]:
    """A mesh's shape: ``"4x2"`` -> ``(4, 2)``; ``8`` -> ``(8,)``; ``"X=4,Y=2"`` -> ``(4, 2)``
    (the book's letters in order); a tuple passes through (validated). Axes named otherwise
    (``fsdp=4,model=2``) are no shape: their names say where they go (``mesh_dims``, and
    ``make_mesh`` keeps them). ``predictions.mesh`` parses; WorkloadError names the forms."""
    dims = mesh_dims(shape)
    named = _named(shape)
    if named and named != BOOK_AXES[:len(named)]:
        raise WorkloadError(f"mesh {shape!r} names its axes {', '.join(named)}: give a shape "
                            f"like {shape_str(dims)} here (axes X, Y by position), or pass the "
                            f"named mesh where it is built")
    return dims


def mesh_name(shape: str | int | Sequence[int]) -> str:
    """A mesh as a run names it: a shape as its shape (``4x2``; ``X=4,Y=2`` read as one), a
    mesh named by role (``fsdp=4,model=2``) as written. WorkloadError names the forms."""
    from predictions import layouts

    named = _named(shape)
    if named and layouts.is_roles(named):
        return str(mesh_text.parse_mesh(shape))
    return shape_str(parse_shape(shape))


def mesh_dims(shape: str | int | Sequence[int]) -> tuple[int, ...]:
    """The axis sizes of a mesh in the order given, named or not (``"fsdp=4,model=2"`` ->
    ``(4, 2)``, ``"4x2"`` -> ``(4, 2)``). WorkloadError names the forms."""
    try:
        return mesh_text.parse_mesh(shape).dims if isinstance(shape, str) \
            else mesh_text.parse_dims(shape)
    except mesh_text.MeshError as e:
        raise WorkloadError(f"mesh shape {shape!r}: {e.reason}") from None


def _named(shape) -> tuple[str, ...] | None:
    """The axis names a mesh given by name carries (``fsdp=4,model=2``); None for a shape."""
    if not isinstance(shape, str):
        return None
    try:
        parsed = mesh_text.parse_mesh(shape)
    except mesh_text.MeshError:
        return None
    return None if parsed.positional else parsed.names


def shape_str(dims: Sequence[int]) -> str:
    return mesh_text.shape_str(dims)


def valid_shapes(n: int) -> list[str]:
    """1-D and 2-D mesh shapes that use exactly ``n`` devices."""
    return [str(n)] + [f"{a}x{n // a}" for a in range(1, n + 1) if n % a == 0]


def default_shape(n: int, ndim: int = 2) -> tuple[int, ...]:
    """The default mesh over ``n`` devices with ``ndim`` axes: every device, data-parallel X
    first. Two axes take Y = 2 when ``n`` is even and at least 4 (8 -> 4x2, 4 -> 2x2), else Y = 1
    (1 -> 1x1, 2 -> 2x1, 6 -> 3x2); further axes have size 1."""
    if ndim < 2:
        return (n,)
    y = 2 if n % 2 == 0 and n >= 4 else 1
    return (n // y, y) + (1,) * (ndim - 2)


def fill_axes(dims: Sequence[int], ndim: int) -> tuple[int, ...]:
    """A missing mesh axis has size 1: ``(1,)`` for a 2-axis workload is ``(1, 1)``."""
    return tuple(dims) + (1,) * (ndim - len(dims))


def workload_mesh(axis_names: Sequence[str], shape: str | int | Sequence[int] | None = None,
                  devices: Sequence[Any] | None = None) -> Mesh:
    """The mesh a workload with axes ``axis_names`` runs on: ``shape`` with missing axes of size
    1, or by default ``default_shape`` over every device there is."""
    pool = list(devices) if devices is not None else jax.devices()
    if _named(shape):  # axes by name (a layout's roles): the mesh as given
        return make_mesh(shape, devices=pool)
    ndim = len(axis_names)
    dims = default_shape(len(pool), ndim) if shape is None else fill_axes(parse_shape(shape), ndim)
    return make_mesh(dims, axis_names, devices=pool)


def _names_for(ndim: int, axis_names: Sequence[str] | None) -> tuple[str, ...]:
    """Names for ``ndim`` axes: the first ``ndim`` of ``axis_names`` (a workload's defaults may
    name more axes than a mesh has), topped up with unused book letters X, Y, Z."""
    given = tuple(axis_names or ())[:ndim]
    spare = [a for a in BOOK_AXES if a not in given]
    if len(given) + len(spare) < ndim:
        raise WorkloadError(f"a {ndim}-D mesh needs {ndim} axis names; got "
                            f"{', '.join(given) or 'none'} and the defaults cover X, Y, Z")
    return given + tuple(spare[:ndim - len(given)])


def _axis_setup(shape, axis_names, axis_types):
    dims = mesh_dims(shape)
    names = _named(shape) or _names_for(len(dims), axis_names)
    if len(set(names)) != len(names):
        raise WorkloadError(f"mesh axis names must differ, got {', '.join(names)}")
    check_choice("axis type", axis_types, AXIS_TYPES)
    return dims, names, (AXIS_TYPES[axis_types],) * len(dims)


def make_mesh(shape: str | int | Sequence[int], axis_names: Sequence[str] | None = None,
              devices: Sequence[Any] | None = None, axis_types: str = "auto",
              allow_subset: bool = False) -> Mesh:
    """A concrete mesh of the given shape over ``devices`` (default: all of ``jax.devices()``).

    Axis names default to the book's X, Y, Z; ``axis_names`` may list more names than the mesh
    has axes (a workload's ``mesh_axes``), the first ones are used.

    The shape must use every device, unless ``allow_subset`` is set, in which case the first
    ``prod(shape)`` devices are used.
    """
    dims, names, types = _axis_setup(shape, axis_names, axis_types)
    pool = list(devices) if devices is not None else jax.devices()
    need = math.prod(dims)
    if need > len(pool) or (need != len(pool) and not allow_subset):
        raise WorkloadError(f"mesh {shape_str(dims)} needs {need} devices but {len(pool)} are "
                            f"available; valid shapes: {', '.join(valid_shapes(len(pool)))}")
    return jax.make_mesh(dims, names, axis_types=types, devices=pool[:need])


def abstract_mesh(shape: str | int | Sequence[int], axis_names: Sequence[str] | None = None,
                  axis_types: str = "auto") -> AbstractMesh:
    """A device-free mesh for ahead-of-time lowering of configs bigger than the host."""
    dims, names, types = _axis_setup(shape, axis_names, axis_types)
    return AbstractMesh(dims, names, axis_types=types)


def axis_size(mesh: AnyMesh, axes: str | Sequence[str] | None) -> int:
    """Devices along ``axes`` (one name, several, or None for 1)."""
    if axes is None:
        return 1
    if isinstance(axes, str):
        axes = (axes,)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    for a in axes:
        check_choice("mesh axis", a, tuple(sizes))
    return math.prod(sizes[a] for a in axes)


def check_spec(mesh: AnyMesh, what: str, shape: Sequence[int], spec: PartitionSpec,
               letters: str | None = None) -> None:
    """Raise ``WorkloadError`` unless each dim of ``shape`` divides by the axes that split it."""
    for i, (dim, axes) in enumerate(zip(shape, tuple(spec) + (None,) * len(shape))):
        n = axis_size(mesh, axes)
        if dim % n:
            letter = letters[i] if letters else f"dim {i}"
            axes_t = (axes,) if isinstance(axes, str) else tuple(axes)
            ok = ", ".join(shape_str(s) for s in _fitting(dim, mesh, axes_t))
            raise WorkloadError(f"{what}: {letter}={dim} is not divisible by mesh axis "
                                f"{'x'.join(axes_t)} of size {n}; {letter} must be a multiple of "
                                f"{n}" + (f", or use a mesh like {ok}" if ok else ""))


def _fitting(dim: int, mesh: AnyMesh, axes: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Same-device-count 2-D meshes whose ``axes`` size divides ``dim`` (for error hints)."""
    total = math.prod(mesh.axis_sizes)
    if len(mesh.axis_sizes) != 2 or len(axes) != 1:
        return []
    pos = mesh.axis_names.index(axes[0])
    out = []
    for a in range(1, total + 1):
        if total % a == 0:
            dims = (a, total // a)
            if dim % dims[pos] == 0:
                out.append(dims)
    return out[:4]


def named(mesh: AnyMesh, spec: PartitionSpec) -> NamedSharding:
    return NamedSharding(mesh, spec)


def put(tree: Any, shardings: Any = None) -> Any:
    """Host arrays -> global device arrays laid out by ``shardings`` (a sharding, or a tree of
    them matching ``tree``; None = default device).

    A sharding that spans other processes' devices (a multi-process run) is built with
    ``jax.make_array_from_callback``: each process, holding the same host value, places only its
    own shards (``jax.device_put`` would first check across processes that the values agree).
    """
    one = isinstance(shardings, jax.sharding.Sharding)
    if shardings is None or all(s.is_fully_addressable
                                for s in ([shardings] if one else jax.tree.leaves(shardings))):
        return jax.device_put(tree, shardings)

    def build(x, sharding):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    if one:
        return jax.tree.map(lambda x: build(x, shardings), tree)
    return jax.tree.map(build, tree, shardings)


def lower_abstract(fn: Any, args: Sequence[Any], platform: str = "cpu") -> Any:
    """Lower a workload built on an ``AbstractMesh`` (``abstract=True``) for ``platform``.

    Returns a ``jax.stages.Lowered``; ``.as_text()`` is StableHLO with Shardy shardings (before
    SPMD partitioning). Compiling needs concrete devices (see module docstring).
    """
    return fn.trace(*args).lower(lowering_platforms=(platform,))


def build_args(abstract: bool, shapes: Any, shardings: Any, host: Callable[[], Any]) -> Any:
    """The arguments a ``build`` returns, of the tree ``shapes`` describes (``jax.ShapeDtypeStruct``
    leaves): with ``abstract``, those shapes carrying ``shardings`` (a sharding or a tree of them
    matching ``shapes``; None: unsharded), for ahead-of-time lowering; else ``host()``'s arrays
    placed by ``shardings`` (``put``, as a multi-process run needs)."""
    if not abstract:
        return put(host(), shardings)
    if shardings is None:
        return shapes
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        shapes, shardings)
