"""A user's own function's memory ahead of time (``harness.memory_of(fn, *args, chip=...)``,
``harness memory --chip CHIP FILE.py:NAME``): the report and the cheapest ways to fit, on this
host's devices or, for a TPU chip, compiled with libtpu for that chip's slice.

For a TPU chip the arguments become ``jax.ShapeDtypeStruct`` on a slice of as many chips as the
arguments' mesh has devices (``workloads.tpu.topology_mesh``, the same axis names and
``PartitionSpec``; an unsharded argument replicated), so nothing is allocated. A function that
closes over a mesh of this host's devices (``in_shardings``, ``with_sharding_constraint`` or
``shard_map`` over it) cannot be lowered there: one line says so. libtpu refuses a program past
the chip's HBM without a buffer assignment; the same program is then compiled for the TPU with
the most HBM (``ROOMY``, the same slice) for what holds its peak, judged against the chip's
HBM.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from harness.capture.memory import footprint
from harness.errors import HarnessError, one_line
from harness.memory import oom
from harness.memory.dump import dump_here
from harness.memory.report import _capacity, of_dump
from harness.record.memory import MemoryReport

ROOMY = "tpu-v5p"  # the TPU with libtpu's largest HBM (96 GB): compiles what a smaller refuses


def _mesh_of(leaves) -> tuple[tuple[int, ...], tuple[str, ...], str]:
    """The arguments' mesh (its shape, axis names, axis type: the first axis's, as
    ``workloads.mesh.AXIS_TYPES`` names it); one device where none is sharded."""
    from jax.sharding import NamedSharding

    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            mesh = sharding.mesh
            kind = str(getattr(mesh, "axis_types", ("auto",))[0]).rsplit(".", 1)[-1].lower()
            return tuple(mesh.axis_sizes), tuple(mesh.axis_names), kind
    return (1,), ("x",), "auto"


def _on_tpu(args: tuple, kwargs: dict, chip: str):
    """``args``/``kwargs`` as ShapeDtypeStructs on ``chip``'s slice, and its device count."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from workloads.mesh import AXIS_TYPES
    from workloads.tpu import topology_mesh

    leaves = jax.tree_util.tree_leaves((args, kwargs))
    dims, names, kind = _mesh_of(leaves)
    mesh, _ = topology_mesh(chip, "x".join(map(str, dims)), names,
                            kind if kind in AXIS_TYPES else "auto")

    def struct(leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        sharding = getattr(leaf, "sharding", None)
        spec = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    moved = jax.tree_util.tree_map(struct, (args, kwargs))
    return moved[0], moved[1], math.prod(dims)


def _lower(jitted, args, kwargs, name: str, chip: str):
    try:
        return jitted.lower(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - shardings on this host's devices: not the chip's
        raise HarnessError(f"{name} cannot be lowered for {chip}: it closes over a mesh of this "
                           f"host's devices; build the mesh inside from the arguments' shardings "
                           f"or pass abstract arguments ({one_line(e)[:160]})") from None


def _compile_tpu(program, args, kwargs, chip: str) -> tuple[MemoryReport, str, int]:
    """The report of ``program`` compiled for ``chip`` (else for ``ROOMY``, where libtpu
    refused it), the compiler's refusal ("" for none), and the slice's device count."""
    from harness.capture.memory import is_oom

    structs, kw, n = _on_tpu(args, kwargs, chip)
    refused = ""
    for target in (chip, ROOMY):
        if target != chip:
            structs, kw, n = _on_tpu(args, kwargs, target)
        lowered = _lower(program.jitted, structs, kw, program.name, target)
        try:
            found = dump_here(lowered, "tpu")
        except Exception as e:  # noqa: BLE001 - libtpu's RESOURCE_EXHAUSTED
            if not is_oom(e) or target == ROOMY:
                raise HarnessError(f"compiling {program.name} for {target} failed: "
                                   f"{one_line(e)[:300]}") from None
            refused = one_line(e)
            continue
        found.compiler = f"XLA:TPU ({target})"
        return of_dump(found, f"{program.name} on {n}x {chip}"), refused, n
    raise AssertionError("unreachable")


def memory_of(fn, *args, chip: str | None = None, **kwargs) -> MemoryReport:
    """``fn(*args, **kwargs)``'s memory, not run: compiled with XLA's dump here, or for
    ``chip``'s TPU slice through libtpu; the peak checked against the chip's HBM (or
    ``$SCALING_HARNESS_DEVICE_MEMORY``), and the cheapest ways to fit among its notes."""
    import jax

    from harness.capture.program import Program
    from predictions import hardware

    if chip is not None:
        hardware.chip_entry(chip)  # a bad name: one line naming the chips
    program = Program(fn, tuple(args), dict(kwargs))
    if program.compiled is not None:
        raise HarnessError(f"{program.name} is compiled already: pass the jitted function")
    if chip and chip.startswith("tpu"):
        if importlib.util.find_spec("libtpu") is None:
            from workloads.tpu import INSTALL_HINT

            raise HarnessError(f"memory for {chip} needs libtpu: {INSTALL_HINT}")
        report, refused, n = _compile_tpu(program, args, kwargs, chip)
    else:
        devices = jax.local_devices()
        lowered = program.jitted.lower(*args, **kwargs)
        report = of_dump(dump_here(lowered, devices[0].platform), program.name)
        refused, n = "", len(devices)
        chip = chip or devices[0].device_kind
    report.capacity = _capacity(chip if chip in hardware.CHIPS else None)
    if refused:
        report.notes.append(f"libtpu refused it for {chip} ({refused[:200]}); what holds the "
                            f"peak is from the same program compiled for {ROOMY}")
    # the would-be peak as check_fits judges it: memory_analysis()'s sum (libtpu's own
    # figure where it refused: "the total memory required ... (18.88G)")
    need = int(footprint(report.compiled)) if report.compiled else None
    if need is None and refused:
        need = oom.need_from_message(refused)[0]
    if refused or (report.capacity is not None and need is not None
                   and need > report.capacity):
        report.refused = refused
        answer = oom.answer(program.name, report, need, report.capacity, chip, n,
                            share=oom.aliasable_share(program.jitted, args, kwargs))
        report.notes += str(answer).splitlines()
    return report


def load_target(spec: str):
    """``FILE.py:NAME``: NAME() in FILE returns ``(fn, args)`` or ``(fn, args, kwargs)``."""
    import runpy

    path, _, name = spec.rpartition(":")
    if not path or not name or not Path(path).is_file():
        raise HarnessError(f"{spec!r} is not FILE.py:NAME (a file, and a function in it that "
                           f"returns (fn, args) or (fn, args, kwargs))")
    found = runpy.run_path(path).get(name)
    if not callable(found):
        raise HarnessError(f"{path} has no function {name!r}")
    built = found()
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise HarnessError(f"{spec}: {name}() returned {type(built).__name__}; it must return "
                           f"(fn, args) or (fn, args, kwargs)")
    return built[0], tuple(built[1]), dict(built[2] if len(built) == 3 else {})
