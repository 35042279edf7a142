"""TPU topologies for ahead-of-time compiles on a host without TPUs (libtpu).

With ``libtpu`` installed, ``jax.experimental.topologies.get_topology_desc`` hands out the devices
of any TPU slice (``"v5e:4x4"``, ``"v5p:4x4x4"``; ``"v5e-16"``-style names are refused) on a
CPU-only machine, and a workload built on them lowers and compiles with the TPU compiler itself
(how MaxText compiles ahead of time for pods it does not have). ``workloads.aot`` does that in a
child process; this module names the topology for a chip and a mesh and builds the mesh there.

``TOPOLOGIES`` is the registry: harness chip name -> libtpu's generation prefix and the torus
dimensionality (`tpus.md`: v5e/v6e slices are 2-D tori, v4/v5p 3-D). A mesh of N devices is laid
on the most cube-like slice of N chips (``topology_dims``): ``tpu-v5e`` + ``4x4`` -> ``v5e:4x4``,
``tpu-v5p`` + ``8x8`` -> ``v5p:4x4x4`` with the 64 chips arranged into the 8x8 mesh by
``jax.experimental.mesh_utils`` (a mesh axis may span several physical axes, `sharding.md`).
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

from workloads.base import WorkloadError

INSTALL_HINT = ("pip install 'scaling-harness[tpu]'  "
                "(libtpu==0.0.42.1, the version jax[tpu] 0.10.2 pins)")

# libtpu's default chips per host (2x2x1); a smaller slice passes its own dims (``_host_bounds``).
DEFAULT_HOST_BOUNDS = (2, 2, 1)

# libtpu looks for a TPU VM's metadata server and worker list and warns on stderr when there is
# none; these settings say "one local worker, no metadata", and allow a second libtpu user (a jax
# process elsewhere on the host holds /tmp/libtpu_lockfile once libtpu is installed).
QUIET_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TPU_STDERR_LOG_LEVEL": "3",
    "TPU_MIN_LOG_LEVEL": "3",
}

# libtpu refuses a program whose temporaries exceed the chip's HBM, early in the compile
# ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, ..."). Going on regardless
# (xla_tpu_no_crash_on_oom) only ends in "Invalid TPU program" after the whole compile, so the
# refusal is reported as the fit verdict instead (``workloads.aot.HbmExhausted``).
OOM_MARK = "RESOURCE_EXHAUSTED"


@dataclass(frozen=True)
class TpuKind:
    """How libtpu names a chip generation's slices."""

    prefix: str                      # "v5e" in "v5e:4x4"
    ndim: int                        # torus dimensions (tpus.md)
    options: tuple[tuple[str, object], ...] = ()  # extra get_topology_desc keyword arguments
    # host memory libtpu gives each chip for offloaded buffers, where a refusal has said it
    host_bytes: float | None = None


TOPOLOGIES: dict[str, TpuKind] = {
    # v4 chips have two TensorCores; the megacore config makes one device per chip, as on a pod
    "tpu-v4p": TpuKind("v4", 3, (("chip_config_name", "megacore"),)),
    # libtpu 0.0.42.1 on v5p:8x8x8: "Allocation (size=219848638464) would exceed memory
    # (size=137438953472) :: ... inlined_call_operand.host [shape: bf16[126,2,8192,53248]"
    # (LLaMA-3.1 405B at 2 x 8192 tokens a chip, remat=minimal_offloaded: one MLP input
    # projection's offloaded activations, 6 min into the compile)
    "tpu-v5p": TpuKind("v5p", 3, host_bytes=128 * 2**30),
    "tpu-v5e": TpuKind("v5e", 2),
    # libtpu 0.0.42.1 on v6e:16x16: "Ran out of memory in memory space host. Used 162.50G of
    # 128.00G host" (LLaMA-3.1 70B with its layer inputs, Q, K, V and out_proj offloaded)
    "tpu-v6e": TpuKind("v6e", 2, host_bytes=128 * 2**30),
}


def libtpu_available() -> bool:
    """True when ``import libtpu`` would succeed (checked without importing it)."""
    return importlib.util.find_spec("libtpu") is not None


def libtpu_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return "unknown"


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def topology_dims(chips: int, ndim: int) -> tuple[int, ...]:
    """The most cube-like ``ndim``-D slice of ``chips`` chips, named as libtpu names slices:
    sizes ascending, unit axes last (64 -> 4x4x4, 256 -> 4x8x8, 4 -> 2x2x1; 2-D 32 -> 4x8)."""
    if chips < 1:
        raise WorkloadError(f"a TPU slice needs at least one chip, got {chips}")
    dims = [1] * ndim
    for p in sorted(_prime_factors(chips), reverse=True):
        dims[dims.index(min(dims))] *= p
    live = sorted(d for d in dims if d > 1)
    return tuple(live + [1] * (ndim - len(live)))


def slice_builds(dims: tuple[int, ...]) -> bool:
    """Whether libtpu builds a slice of these axes: each axis a multiple of the host's chips
    along it, or within one host (libtpu 0.0.42.1 refuses ``v5p:3x3x1``: "not divisible by
    the given (or default) chips_per_host_bounds 2x2x1"; ``v5p:2x2x3`` and ``v6e:4x6`` build)."""
    padded = tuple(dims) + (1,) * (3 - len(dims))
    return all(d % min(b, d) == 0 for b, d in zip(DEFAULT_HOST_BOUNDS, padded))


def _kind(chip: str) -> TpuKind:
    kind = TOPOLOGIES.get(str(chip).lower())
    if kind is None:
        raise WorkloadError(f"no libtpu topology for chip {chip!r}; chips with one: "
                            f"{', '.join(TOPOLOGIES)}")
    return kind


def check_slice(chip: str, mesh_dims: tuple[int, ...]) -> tuple[int, ...]:
    """The slice a mesh is laid on (``topology_dims``), or WorkloadError (one line) when libtpu
    cannot build it, naming the nearest chip counts it can (checked before any compile)."""
    kind, chips = _kind(chip), math.prod(mesh_dims)
    dims = topology_dims(chips, kind.ndim)
    if slice_builds(dims):
        return dims
    name = lambda n: f"{n} ({kind.prefix}:{'x'.join(map(str, topology_dims(n, kind.ndim)))})"
    below = next((n for n in range(chips - 1, 0, -1)
                  if slice_builds(topology_dims(n, kind.ndim))), None)
    above = next(n for n in range(chips + 1, 2 * chips + 9)
                 if slice_builds(topology_dims(n, kind.ndim)))
    host = "x".join(map(str, DEFAULT_HOST_BOUNDS))
    raise WorkloadError(
        f"mesh {'x'.join(map(str, mesh_dims))} needs a {chip} slice of {chips} chips, "
        f"{kind.prefix}:{'x'.join(map(str, dims))}, which libtpu cannot build (each axis must "
        f"be a multiple of the {host} chips of a host, or fit in one); valid slices nearby: "
        + ", ".join(name(n) for n in (below, above) if n) + " chips")


def topology_name(chip: str, mesh_dims: tuple[int, ...]) -> str:
    """``("tpu-v5p", (8, 8))`` -> ``"v5p:4x4x4"``; WorkloadError names the chips with a
    topology when ``chip`` has none, and the slices nearby when libtpu cannot build this one."""
    return f"{_kind(chip).prefix}:" + "x".join(map(str, check_slice(chip, mesh_dims)))


def _host_bounds(dims: tuple[int, ...]) -> list[int] | None:
    """Chips per host for a slice smaller than libtpu's default host (None = the default)."""
    padded = tuple(dims) + (1,) * (3 - len(dims))
    bounds = [min(b, d) for b, d in zip(DEFAULT_HOST_BOUNDS, padded)]
    return None if tuple(bounds) == DEFAULT_HOST_BOUNDS else bounds


def topology_mesh(chip: str, mesh_shape: str, axis_names, axis_types: str = "auto"):
    """In a process with libtpu: the TPU slice for ``chip`` and ``mesh_shape``, its devices
    arranged into a ``jax.sharding.Mesh`` with the workload's axis names (Auto axes, as
    ``workloads.mesh.make_mesh``). Returns ``(mesh, topology name)``."""
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import Mesh

    from workloads.mesh import _axis_setup

    dims, names, types = _axis_setup(mesh_shape, axis_names, axis_types)
    name = topology_name(chip, dims)
    kind = TOPOLOGIES[str(chip).lower()]
    options = dict(kind.options)
    bounds = _host_bounds(tuple(int(d) for d in name.split(":")[1].split("x")))
    if bounds is not None:
        options["chips_per_host_bounds"] = bounds
    topo = topologies.get_topology_desc(topology_name=name, platform="tpu", **options)
    devices = mesh_utils.create_device_mesh(dims, topo.devices, allow_split_physical_axes=True)
    return Mesh(devices, names, axis_types=types), name
