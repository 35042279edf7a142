"""One collective, written with ``jax.shard_map`` (manual mode, `jax-stuff.md`), at a chosen size.

The global input is ``x[*mesh.axis_sizes, M]``: device (i, j, ...) holds row ``x[i, j, ...]`` of
``M = nbytes / itemsize`` elements, so ``nbytes`` is the per-device *input* buffer (for an
AllGather the book's V, the output, is n x nbytes; for a ReduceScatter V = nbytes). The collective
runs over ``axes`` (``"X"`` or ``"X,Y"``), i.e. within groups of n = prod(|axis|) devices; the
other axes index independent groups. Names follow reference §4.4:

| kind           | jax                 | HLO opcode          | per-device result            |
|----------------|---------------------|---------------------|------------------------------|
| all_gather     | lax.all_gather      | all-gather          | [n, M]: the group's rows     |
| reduce_scatter | lax.psum_scatter    | reduce-scatter      | [M/n]: my chunk of the sum   |
| all_reduce     | lax.psum            | all-reduce          | [M]: the group's sum         |
| all_to_all     | lax.all_to_all      | all-to-all          | [M]: chunk j from member j   |
| ppermute       | lax.ppermute        | collective-permute  | [M]: the row of member i-1   |

``reference(cfg, x)`` computes each result with NumPy for the tests.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from predictions import collectives as book_collectives
from predictions.collectives import axis_names
from predictions.step import Analytic
from workloads.base import (
    BusBytes,
    SweepFigures,
    Workload,
    WorkloadError,
    canonical_dtype,
    check_choice,
)
from workloads.mesh import AnyMesh, axis_size, build_args, named, shape_str


@dataclass(frozen=True)
class Kind:
    """A collective: its HLO opcode, the per-device body, and the result's global layout.

    ``result``: "stacked" [*others, n, M] (the group's rows), "reduced" [*others, M],
    "scattered" [*others, M] with M split over the group, or "same" as the input.
    """

    opcode: str
    body: Callable    # (x_M, axes, n) -> local result
    chunked: bool     # M must split into n equal chunks
    result: str
    numpy: Callable   # g[*others, n, M] (group rows) -> the same result with NumPy


def _np_sum(g):
    return g.astype(np.float64).sum(axis=-2).astype(g.dtype)


def _np_all_to_all(g):  # member i receives chunk i of every member j, ordered by j
    n, m = g.shape[-2:]
    chunks = g.reshape(*g.shape[:-2], n, n, m // n)
    return np.swapaxes(chunks, -3, -2).reshape(g.shape)


def _np_ppermute(g):    # member i + 1 receives member i's row
    return np.roll(g, 1, axis=-2)


def _ring(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def _all_gather(x, axes, n):
    return jax.lax.all_gather(x, axes, axis=0)


def _reduce_scatter(x, axes, n):
    return jax.lax.psum_scatter(x, axes, scatter_dimension=0, tiled=True)


def _all_reduce(x, axes, n):
    return jax.lax.psum(x, axes)


def _all_to_all(x, axes, n):
    return jax.lax.all_to_all(x, axes, 0, 0, tiled=True)


def _ppermute(x, axes, n):
    return jax.lax.ppermute(x, axes, _ring(n))


KINDS: dict[str, Kind] = {
    "all_gather": Kind("all-gather", _all_gather, False, "stacked", lambda g: g),
    "reduce_scatter": Kind("reduce-scatter", _reduce_scatter, True, "scattered", _np_sum),
    "all_reduce": Kind("all-reduce", _all_reduce, False, "reduced", _np_sum),
    "all_to_all": Kind("all-to-all", _all_to_all, True, "same", _np_all_to_all),
    "ppermute": Kind("collective-permute", _ppermute, False, "same", _np_ppermute),
}


@dataclass(frozen=True)
class CollectiveConfig:
    """``kind`` over mesh ``axes`` with ``nbytes`` of ``dtype`` held by each device."""

    kind: str = "all_gather"
    axes: str = "X"
    nbytes: int = 1 << 20
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self):
        check_choice("collective kind", self.kind, KINDS)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if self.nbytes < 1:
            raise WorkloadError(f"nbytes must be positive, got {self.nbytes}")

    @property
    def axis_names(self) -> tuple[str, ...]:
        return axis_names(self.axes)


PRESETS: dict[str, CollectiveConfig] = {
    "tiny": CollectiveConfig(nbytes=4096),
    "1mb": CollectiveConfig(nbytes=1 << 20),
    # per-device size where v5e AllGather reaches ~95% of link peak (sharding.md)
    "large": CollectiveConfig(nbytes=16 << 20),
}


def _layout(cfg: CollectiveConfig, mesh: AnyMesh) -> tuple[tuple[str, ...], int, int]:
    """(group axes, n, M) after validating axes and sizes against the mesh."""
    axes = cfg.axis_names
    if not axes:
        raise WorkloadError(f"axes is empty; valid: {', '.join(mesh.axis_names)} or 'X,Y'")
    for a in axes:
        check_choice("mesh axis", a, tuple(mesh.axis_names))
    ordered = tuple(a for a in mesh.axis_names if a in axes)  # mesh order = NumPy reshape order
    n = axis_size(mesh, ordered)
    if n == 1 and math.prod(mesh.axis_sizes) > 1:
        sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
        wider = [a for a, k in sizes.items() if k > 1]
        raise WorkloadError(f"{cfg.kind} over {'x'.join(ordered)} spans 1 device and moves no "
                            f"data; valid axes here: {', '.join(wider)}")
    if n == 1:
        raise WorkloadError(f"{cfg.kind} on 1 device moves no data (XLA runs no collective); "
                            "run it on 2 or more devices (on CPU: harness --devices N)")
    itemsize = jnp.dtype(cfg.dtype).itemsize
    unit = itemsize * (n if KINDS[cfg.kind].chunked else 1)
    if cfg.nbytes % unit:
        raise WorkloadError(f"{cfg.kind} over {'x'.join(ordered)} (n={n}) needs nbytes a multiple "
                            f"of {unit}, got {cfg.nbytes}; try {cfg.nbytes // unit * unit or unit}")
    return ordered, n, cfg.nbytes // itemsize


def expected_collectives(cfg: CollectiveConfig, mesh: AnyMesh | None = None) -> dict[str, int]:
    """One instruction of the kind's opcode (`jax-stuff.md` names, reference §4.4)."""
    return {KINDS[cfg.kind].opcode: 1}


def out_spec(cfg: CollectiveConfig, mesh: AnyMesh) -> P:
    """Global result layout (see ``Kind``): the group axes drop out of stacked/reduced results."""
    axes, _, _ = _layout(cfg, mesh)
    others = tuple(a for a in mesh.axis_names if a not in axes)
    specs = {
        "stacked": P(*others, None, None),
        "reduced": P(*others, None),
        "scattered": P(*others, axes),
        "same": P(*mesh.axis_names, None),
    }
    return specs[KINDS[cfg.kind].result]


def build(cfg: CollectiveConfig, mesh: AnyMesh, abstract: bool = False):
    """``(fn, (x,))`` with ``x[*mesh.axis_sizes, M]`` sharded one row per device."""
    axes, n, m = _layout(cfg, mesh)
    kind = KINDS[cfg.kind]
    in_spec = P(*mesh.axis_names, None)
    spec = out_spec(cfg, mesh)

    def local(x):
        y = kind.body(x.reshape(m), axes, n)
        return y.reshape((1,) * (len(spec) - y.ndim) + y.shape)  # unit dims for the sharded axes

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_spec, out_specs=spec, check_vma=False),
                 in_shardings=named(mesh, in_spec), out_shardings=named(mesh, spec))
    shape = jax.ShapeDtypeStruct(tuple(mesh.axis_sizes) + (m,), jnp.dtype(cfg.dtype))
    return fn, (build_args(abstract, shape, named(mesh, in_spec), lambda: inputs(cfg, mesh)),)


def inputs(cfg: CollectiveConfig, mesh: AnyMesh) -> np.ndarray:
    """Small integers (exact in every dtype, sums included) of shape ``[*mesh.axis_sizes, M]``."""
    _, _, m = _layout(cfg, mesh)
    rng = np.random.default_rng(cfg.seed)
    x = rng.integers(-8, 8, size=tuple(mesh.axis_sizes) + (m,))
    return np.asarray(jnp.asarray(x, jnp.dtype(cfg.dtype)))


def reference(cfg: CollectiveConfig, mesh: AnyMesh, x: np.ndarray) -> np.ndarray:
    """The global result of ``build``'s fn for input ``x``, computed with NumPy."""
    axes, n, m = _layout(cfg, mesh)
    names = list(mesh.axis_names)
    other_idx = [i for i, a in enumerate(names) if a not in axes]
    group_idx = [i for i, a in enumerate(names) if a in axes]
    other_sizes = [mesh.axis_sizes[i] for i in other_idx]
    # rows grouped: g[*others, member, M], members in mesh order (major to minor)
    g = np.transpose(x, other_idx + group_idx + [len(names)]).reshape(*other_sizes, n, m)
    y = KINDS[cfg.kind].numpy(g)
    if KINDS[cfg.kind].result != "same":
        return y
    y = y.reshape(*other_sizes, *(mesh.axis_sizes[i] for i in group_idx), m)
    return np.transpose(y, np.argsort(other_idx + group_idx + [len(names)]))


def book(cfg: CollectiveConfig, mesh, chip) -> Analytic:
    """The book's time for the collective on ``chip``; no FLOPs."""
    axes = book_collectives.axis_sizes(cfg.axes, dict(mesh.shape))
    n = math.prod(axes)
    opcode = KINDS[cfg.kind].opcode
    bus = book_collectives.BUS_BYTES[opcode](float(cfg.nbytes), n) if n > 1 else math.nan
    if opcode == "collective-permute":
        # sharding.md: a point-to-point shift moves the whole buffer over one link
        return Analytic(0.0, book_collectives.ppermute(cfg.nbytes, chip), "bytes/W_1 (sharding.md)",
                        bus_bytes=bus)
    v = book_collectives.V_OF_INPUT[opcode](cfg.nbytes, n)
    t = book_collectives.estimate(opcode, v, axes, chip)
    return Analytic(0.0, t.seconds, f"{t.formula} (sharding.md)", bus_bytes=bus)


def figures(cfg: CollectiveConfig, mesh) -> SweepFigures:
    """In a sweep: the bus bandwidth (nccl-tests' busbw: the bytes each device moves over links,
    `sharding.md`'s ring) against message size, one curve per mesh, group axes and dtype."""
    sizes = dict(mesh.shape)
    n = math.prod(book_collectives.axis_sizes(cfg.axes, sizes))
    b = float(cfg.nbytes)
    bus = book_collectives.BUS_BYTES[KINDS[cfg.kind].opcode](b, n) if n > 1 else math.nan
    series = (f"mesh {shape_str(tuple(sizes.values()))} over {'+'.join(cfg.axis_names)} "
              f"({n} devices), {cfg.dtype}")
    return SweepFigures(series, bus=BusBytes(cfg.kind, n, b, bus))


WORKLOAD = Workload(
    name="collective",
    Config=CollectiveConfig,
    build=build,
    presets=PRESETS,
    description="shard_map all-gather / reduce-scatter / all-reduce / all-to-all / ppermute "
                "over mesh axes, nbytes per device",
    expected_collectives=expected_collectives,
    book=book,
    figures=figures,
)
