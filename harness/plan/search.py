"""``predict-hlo`` with no ``remat`` given: the policy with the least recomputation that fits.

A workload lists its remat policies from the least recomputation to the most
(``Workload.remat_order``; ``llama_train``: MaxText's order, ``workloads.llama.remat``). libtpu
refuses a program whose temporaries exceed the chip's HBM, early in the compile
(``workloads.aot.HbmExhausted``), so for a TPU chip compiled by libtpu each policy is compiled
in turn until one fits; that one is used (its compile is cached, so ``predict-hlo`` reads it
back) and a note says which and why. `transformers.md` (reference §5.2): remat trades FLOPs for
activation memory, so the first that fits is the fastest that fits.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

REMAT = "remat"


def wanted(workload, overrides: Mapping[str, str], tpu_chip: str | None) -> bool:
    """Choose only when no remat was given, the workload has policies, and libtpu judges fit."""
    return bool(tpu_chip) and REMAT not in overrides and bool(workload.remat_order)


def choose(workload, preset: str, overrides: Mapping[str, str], mesh_shape: str,
           tpu_chip: str, cache_dir: Path | None,
           progress: Callable[[str], None] = lambda line: None) -> tuple[dict, str]:
    """``(overrides with remat set, one line saying which and why)``: the first policy of
    ``workload.remat_order`` whose compile for ``tpu_chip`` fits; the last one when none does
    (its compile then reports the refusal)."""
    from workloads.aot import HbmExhausted, start_compile

    refused: list[str] = []
    order = list(workload.remat_order)
    for name in order:
        trial = {**overrides, REMAT: name}
        progress(f"remat={name}: compiling for {tpu_chip} ...")
        try:
            start_compile(workload.name, preset, trial, mesh_shape, tpu_chip=tpu_chip,
                          cache_dir=cache_dir).result()
        except HbmExhausted as e:
            progress(f"remat={name}: does not fit {tpu_chip} ({e})")
            refused.append(name)
            continue
        why = (f"the least recomputation that fits {tpu_chip}'s HBM"
               + (f" ({', '.join(refused)}: do not fit)" if refused else ""))
        return trial, f"remat={name} (no remat given): {why}"
    return ({**overrides, REMAT: order[-1]},
            f"no remat policy fits {tpu_chip}'s HBM ({', '.join(refused)} refused)")
