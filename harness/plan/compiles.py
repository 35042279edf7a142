"""Which compiler prices each chip ahead of time, and the compiles themselves (``predict-hlo``
and ``harness plan``).

A TPU chip with a libtpu topology (``workloads.tpu.TOPOLOGIES``) is compiled for its own slice
by the TPU compiler when libtpu is installed (``auto``/``tpu``); every other chip, and every
chip with ``cpu``, costs the HLO of a compile on virtual CPU devices. With ``auto`` the CPU
compile also runs beside a TPU one, so the gap to the book can be shown for both.
"""
from __future__ import annotations

from pathlib import Path

from harness.chip.cache import cache_root
from harness.errors import HarnessError
from harness.hlo import cross_check, parse_module

COMPILERS = {
    "auto": "the TPU compiler for TPU chips when libtpu is installed (and XLA:CPU beside it)",
    "tpu": "the TPU compiler only (needs libtpu)",
    "cpu": "XLA:CPU on virtual devices only",
    "none": "harness plan only: nothing compiled, every layout priced by the book's arithmetic "
            "(the sizes no host compiles: 405B on thousands of chips)",
}
CPU = "cpu"  # the compile key of the virtual-CPU compile; a TPU compile's key is its chip
NONE = "none"  # harness plan's book-only ranking


def compile_keys(chip_names: list[str], compiler: str, have_libtpu: bool
                 ) -> tuple[dict, list[str]]:
    """chip -> compile key (``"cpu"`` or the chip itself for a TPU compile), and notes to print
    (one line each). HarnessError when ``--compiler tpu`` cannot be honoured."""
    from workloads import tpu

    if compiler == NONE:
        raise HarnessError("--compiler none is harness plan's, for llama_train's layouts (the "
                           "book's arithmetic only); valid here: "
                           f"{', '.join(k for k in COMPILERS if k != NONE)}")
    keys, notes = {}, []
    for name in chip_names:
        has_topology = name in tpu.TOPOLOGIES
        if compiler == "tpu" and not has_topology:
            raise HarnessError(f"--compiler tpu: chip {name} has no libtpu topology; chips with "
                               f"one: {', '.join(tpu.TOPOLOGIES)}")
        if compiler == "tpu" and not have_libtpu:
            raise HarnessError(f"--compiler tpu needs libtpu, which is not installed: "
                               f"{tpu.INSTALL_HINT}")
        if has_topology and compiler != CPU and not have_libtpu:
            notes.append(f"{name}: libtpu is not installed, so XLA:CPU's HLO is costed as if on "
                         f"{name}; for the TPU compiler: {tpu.INSTALL_HINT}")
        keys[name] = name if has_topology and compiler != CPU and have_libtpu else CPU
    return keys, notes


def aot_cache_dir() -> Path:
    """``$SCALING_HARNESS_CACHE/aot`` (default ``~/.cache/scaling-harness/aot``)."""
    return cache_root() / "aot"


def compile_all(workload: str, preset: str, overrides: dict, mesh_shape: str, keys: dict,
                compiler: str, cache_dir: Path | None) -> dict:
    """Run every needed compile side by side; key -> (AotResult, Module, cross-check), or the
    ``HbmExhausted`` refusal of a TPU compile when the CPU compile runs beside it."""
    from workloads.aot import HbmExhausted, start_compile

    needed = list(dict.fromkeys(keys.values()))
    if compiler == "auto" and CPU not in needed:
        needed.append(CPU)  # the gap table shows both compilers' HLO
    jobs = {k: start_compile(workload, preset, overrides, mesh_shape,
                             tpu_chip=None if k == CPU else k, cache_dir=cache_dir)
            for k in needed}
    out = {}
    for key, job in jobs.items():
        try:
            aot = job.result()
        except HbmExhausted as e:  # the fit verdict; the chip is costed on the CPU compile
            if CPU not in jobs:
                raise HarnessError(f"does not fit: {e} (--compiler auto costs the CPU compile "
                                   "instead)") from None
            out[key] = e
            continue
        module = parse_module(aot.hlo_text)
        out[key] = (aot, module, cross_check(module, aot.cost_analysis))
    return out


def compile_line(aot, check: dict, mesh: str) -> str:
    """How the program was compiled, and our FLOPs against XLA's cost_analysis: first with
    loop bodies counted once, as XLA counts them (the like-for-like check), then with each body
    times its trip count (what runs; XLA's figure leaves the trips out)."""
    where = (f"for {aot.topology} ({aot.devices} chips as mesh {mesh})" if aot.topology
             else f"on {aot.devices} virtual CPU devices")
    when = "cached; when compiled: " if aot.cached else ""
    return (f"{aot.compiler} {where}: {when}lowered in {aot.lower_s:.1f} s, compiled in "
            f"{aot.compile_s:.1f} s; HLO FLOPs vs XLA cost_analysis, loop bodies once as XLA "
            f"counts them: {_rel(check, 'flops_loops_once')}; each body x its trip count (what "
            f"runs, which XLA's figure leaves out): {_rel(check, 'flops')}")


def _rel(check: dict, key: str) -> str:
    v = check.get(f"{key}_rel_diff")
    return "n/a" if v is None else f"{v:+.1%}"
