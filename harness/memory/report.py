"""A program's memory in one object (``MemoryReport``): the three peaks, what holds them, the
buffers live at the compiled peak, live bytes over the step; made from XLA's dump
(``of_dump``) or by compiling a workload (``of_workload``); rendered as text, md or json, and
as the dict a run keeps under ``schema.MEMORY`` (``to_dict``/``from_dict``)."""
from __future__ import annotations

from harness.hlo import parse_module
from harness.hlo.attrs import HloParseError
from harness.memory import assignment, buffers, peaks
from harness.memory.dump import Dump, compile_dump, dump_here
from harness.record.memory import ANALYSIS, MemoryReport, compiled_line, peaks_line

__all__ = ["ANALYSIS", "MemoryReport", "compiled_line", "of_dump", "of_function", "of_run",
           "of_workload", "peaks_line"]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "int8": 1}


def of_dump(dump: Dump, title: str, book: dict | None = None, dtype_bytes: int = 2,
            capacity: int | None = None, measured: tuple[int | None, str] = (None, "")
            ) -> MemoryReport:
    """The report of one compiled program's dump (``harness.memory.dump``)."""
    report = MemoryReport(title, dump.program, dump.compiler, dict(dump.memory), None,
                          dict(book or {}), measured[0], measured[1], capacity, dump.refused)
    if dump.refused:
        report.notes.append(f"the compiler refused the program: {dump.refused}")
        return report
    found = assignment.read(dump.assignment, dump.live_range)
    try:
        module = parse_module(dump.hlo) if dump.hlo else None
    except HloParseError as e:
        module = None
        report.notes.append(f"the dumped HLO could not be read ({e}); buffers without ops")
    if found.peak_at is None:
        report.notes.append("the dump holds no live ranges: no buffers at the peak")
    report.live_peak = found.peak_bytes or None
    report.buffers = buffers.at_peak(found, module)
    report.timeline = buffers.timeline(found)
    report.holds = peaks.holds_table(report.buffers, report.book, dtype_bytes)
    note = peaks.footprint_note(report.compiled, report.live_peak)
    report.notes += [note] if note else []
    if found.skipped:
        report.notes.append(f"{found.skipped} line(s) of the dump were not understood; skipped")
    return report


def _capacity(chip: str | None) -> int | None:
    """What a device holds: ``$SCALING_HARNESS_DEVICE_MEMORY``, else the chip's HBM (a CPU's
    share of the host's RAM is not a limit the compiler knows: None)."""
    import os

    from harness.capture.memory import MEMORY_ENV, parse_bytes
    from predictions import hardware

    if os.environ.get(MEMORY_ENV):
        return parse_bytes(os.environ[MEMORY_ENV])
    if chip and chip != "cpu":
        return int(hardware.chip_entry(chip).hbm_bytes)
    return None


def of_workload(name: str, preset: str = "tiny", overrides: dict | None = None,
                mesh: str | None = None, chip: str | None = None) -> MemoryReport:
    """Compile workload ``name`` (for ``chip``'s TPU slice where it is a TPU, else on virtual
    CPU devices) with XLA's dump on, and report its memory beside the book's model."""
    import workloads
    from predictions import hardware
    from workloads.mesh import abstract_mesh, fill_axes, mesh_dims

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    shape = mesh or "x".join("1" for _ in wl.mesh_axes)
    if chip is not None:
        hardware.chip_entry(chip)  # a bad name: one line naming the chips
    tpu_chip = chip if chip and chip.startswith("tpu") else None
    if "=" in shape:  # axes by name (a layout's roles)
        jmesh = abstract_mesh(shape)
    else:             # the book's model needs no devices: a device-free mesh of that shape
        jmesh = abstract_mesh(fill_axes(mesh_dims(shape), len(wl.mesh_axes)), wl.mesh_axes)
    book = wl.memory(cfg, jmesh) if wl.memory is not None else {}
    dump = compile_dump(name, preset, overrides, shape, tpu_chip)
    dtype = getattr(cfg, "param_dtype", None) or getattr(cfg, "dtype", "bfloat16")
    report = of_dump(dump, f"{name} ({preset}) on mesh {shape}, {chip or 'cpu'}", book,
                     DTYPE_BYTES.get(str(dtype), 2), _capacity(chip),
                     (None, "none measured: the program was compiled, not run"))
    if not book:
        report.notes.append(f"{name} has no book model of its memory (Workload.memory)")
    return report


def of_run(name: str, preset: str, overrides: dict | None, mesh: str | None,
           chip: str | None, devices) -> MemoryReport:
    """The memory of a run of workload ``name`` (``harness run --memory``): ``of_workload``'s
    report, with the peak the allocator of the ``devices`` that ran it measured (their
    process's whole life; none on CPU, ``peaks.measured_peak``)."""
    report = of_workload(name, preset, overrides, mesh, chip)
    report.measured, report.measured_note = peaks.measured_peak(list(devices))
    return report


def of_function(fn, args: tuple, kwargs: dict, devices) -> MemoryReport | None:
    """The memory of a user's own function (``harness.analyze(..., memory=True)``): compiled
    once more, in this process, with XLA's dump on (``dump.dump_here``); no book model (the
    note says so); measured: set it after the run (``peaks.measured_peak``). None for a
    program compiled already (``jax.jit(f).lower(...).compile()``): it cannot be compiled
    again with the dump."""
    from harness.capture.program import Program

    program = Program(fn, tuple(args), dict(kwargs))
    if program.compiled is not None:
        return None
    devices = list(devices)
    platform = getattr(devices[0], "platform", "") if devices else ""
    found = dump_here(program.jitted.lower(*args, **kwargs), platform)
    report = of_dump(found, program.name, capacity=_capacity(None), measured=(None, ""))
    report.notes.append("the book has no model of a user's own program's memory: the compiled "
                        "peak and what holds it are XLA's alone")
    return report
