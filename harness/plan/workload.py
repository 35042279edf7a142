"""A workload compiled ahead of time and priced on each chip, without running it
(``harness predict-hlo``).

Each chip's HLO comes from the compile ``harness.plan.compiles`` chooses for it (libtpu's for a
TPU chip with a topology, else XLA:CPU's on virtual devices; a mesh libtpu cannot lay on a
slice is refused before any compile); with no ``remat`` given, the memory knobs are the
cheapest setting that fits (``harness.plan.search``). Each chip's step is its schedule
played at the roofline (``harness.plan.predict.predict_module``), set beside the book's part by
part (``book_gap``) and its memory against the chip's HBM; a chip whose TPU compile libtpu
refused is reported first (``harness.plan.fit.describe_refusal``) and priced on XLA:CPU's
program, which is not a bound for it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness import schema
from harness.capture.memory import memory_fit
from harness.errors import HarnessError
from harness.plan import search
from harness.plan.compiles import CPU, compile_all, compile_keys
from harness.plan.fit import describe_refusal
from harness.plan.predict import ChipPrediction, book_gap, predict_module
from harness.report.heading import mesh_str
from predictions.hardware import Chip

CPU_NOT_A_BOUND = ("XLA:CPU's program priced at this chip's roofline: NOT a TPU bound (libtpu "
                   "refused the TPU program; the CPU compiler's fusions, layouts and memory are "
                   "not the TPU's)")
# utilisation figures not shown for a chip whose TPU compile was refused
NOT_FOR_REFUSED = frozenset({schema.MFU_AT_ROOFLINE, schema.MFU, schema.MFU_BOOK, schema.HFU})


@dataclass
class ChipResult:
    """One chip's prediction: the compile it was priced on (``"cpu"`` or the chip itself), the
    step beside the book's (None without a book model), its memory fit (None when no TPU
    compile measured it) and the totals shown."""

    chip: str
    compile: str
    prediction: ChipPrediction
    gap: pd.DataFrame | None
    fit: dict | None
    totals: dict


@dataclass
class WorkloadPrediction:
    """Every chip's prediction of one workload config on one mesh."""

    header: str
    mesh_shape: str
    notes: list[str]
    compiles: dict   # key -> (AotResult, Module, cross-check), or libtpu's refusal (exception)
    refusals: dict   # chip -> (lines, json) of the refusal, for a chip libtpu refused
    chips: list[ChipResult]
    fit_table: pd.DataFrame | None = None  # the fit search's ranking (search.table), if run

    @property
    def compiled(self) -> dict:
        """The compiles that gave a program (key -> (AotResult, Module, cross-check))."""
        return {k: v for k, v in self.compiles.items() if not isinstance(v, Exception)}


def predict_workload(workload: str, preset: str, overrides: dict, mesh_shape: str,
                     chips: list[Chip], compiler: str, cache_dir: Path | None,
                     progress: Callable[[str], None] = lambda line: None,
                     network=None, fit_compiles: int = 1) -> WorkloadPrediction:
    """Compile ``workload`` for ``chips`` (``compiler``: a key of ``compiles.COMPILERS``) on
    the mesh ``mesh_shape`` ("8x8"), setting the memory knobs when no remat is given (each
    trial compile's line handed to ``progress``), and price it on each chip; ``network`` (a
    ``harness.chip.network.Declared``): collectives at the network levels they cross, the
    mesh's devices row-major over the declared nodes or slices (a TPU program is compiled as
    one slice of all of them: libtpu's multi-slice program moves DCN bytes as megascale
    transfers, which are not priced as collectives); ``fit_compiles``: the settings the fit
    search places (``search.search``; 0: it ranks them by the memory model, nothing is
    compiled and no chip priced)."""
    import workloads  # deferred: importing workloads imports jax
    from harness.chip.network import describe, resolve
    from predictions.mesh import parse_mesh
    from workloads import tpu
    from workloads.mesh import mesh_dims

    wl = workloads.get(workload)
    cfg = workloads.make_config(workload, preset, overrides)
    given = parse_mesh(mesh_shape)  # axes by name keep theirs; a shape takes the workload's
    mesh = SimpleNamespace(shape=dict(zip(wl.mesh_axes, given.dims)) if given.positional
                           else given.shape)
    keys, notes = compile_keys([c.name for c in chips], compiler, tpu.libtpu_available())
    # before any compile: the declared network on each chip (one line when it cannot be)
    systems = {c.name: resolve(network, c, given.size) for c in chips} if network else {}
    notes += [describe(s) for s in systems.values() if s is not None]
    for key in set(keys.values()) - {CPU}:  # before any compile: a slice libtpu can build
        tpu.check_slice(key, mesh_dims(mesh_shape))
    tpu_key = next((k for k in keys.values() if k != CPU), None)
    chose_remat, ranking = search.wanted(wl, overrides, tpu_key), None
    header = f"{workload} ({preset}) on mesh {mesh_str(dict(mesh.shape))}"
    if not chose_remat and not fit_compiles:
        raise HarnessError("--compile 0 ranks the fit search's settings without compiling: "
                           "only with no remat given, for a TPU chip with libtpu")
    if chose_remat:  # no remat given: the cheapest knobs that fit
        fit = search.search(wl, preset, overrides, mesh_shape, tpu_key, cache_dir, progress,
                            fit_compiles)
        overrides, ranking = fit.sets, fit.table
        notes.append(fit.note)
        cfg = workloads.make_config(workload, preset, overrides)
        if not fit_compiles:  # the ranking alone
            return WorkloadPrediction(header, mesh_shape, notes, {}, {}, [], ranking)
    compiles = compile_all(workload, preset, overrides, mesh_shape, keys, compiler, cache_dir)
    refusals, results = {}, []
    for chip in chips:
        key = keys[chip.name]
        refused = compiles.get(key) if isinstance(compiles.get(key), Exception) else None
        if refused is not None:  # said first; the CPU compile priced below, not as a bound
            refusals[chip.name] = describe_refusal(
                refused, chip.name, wl, preset, overrides, mesh_shape,
                compiles[CPU][1] if CPU in compiles else None, chose_remat)
            key = keys[chip.name] = CPU
        book = wl.book(cfg, mesh, chip) if wl.book is not None else None
        result = _price(chip, key, compiles, book, systems.get(chip.name))
        if refused is not None:  # XLA:CPU's program: no utilisation to claim for the TPU
            result.fit = {"fits": False, "refused": refusals[chip.name][1]}
            result.totals = {k: v for k, v in result.totals.items() if k not in NOT_FOR_REFUSED}
        results.append(result)
    return WorkloadPrediction(header, mesh_shape, notes, compiles, refusals, results, ranking)


def _price(chip: Chip, key: str, compiles: dict, book, system=None) -> ChipResult:
    """``chip`` priced on the compile ``key``, beside the book's step (``book``: the workload's
    ``predictions.step.Analytic``, or None) for each compile that ran; ``system``: its
    collectives at the network levels they cross."""
    aot, module, _ = compiles[key]
    pred = predict_module(module, chip, devices=aot.devices,
                          model_flops=book.model_flops if book else None,
                          analytic_s=book.analytic_s if book else None, system=system)
    label = "tpu" if key != CPU else CPU
    by_compile, steps = {label: pred.ops}, {label: pred.step.step_s}
    if key != CPU and CPU in compiles:
        on_cpu = predict_module(compiles[CPU][1], chip, system=system)
        by_compile[CPU], steps[CPU] = on_cpu.ops, on_cpu.step.step_s
    gap = book_gap(book.parts, by_compile, steps) if book and book.parts else None
    fit = (memory_fit(aot.memory, chip, placed=True)  # libtpu returned it: placed
           if aot.topology and aot.memory else None)
    return ChipResult(chip.name, key, pred, gap, fit, dict(pred.totals))
