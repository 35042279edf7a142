"""The fit search's compiles (``harness.plan.search``): one setting compiled for the TPU chip,
libtpu's refusal read for the bytes it is over (``harness.plan.fit``), a refused setting's loss
chunked further where the memory model says that saves as much, and a placed one's compiled
schedule played at the roofline (``simulated_s``, as ``predict-hlo`` reports a step).
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness import schema
from harness.plan.fit import RefusalUnreadable, parse_refusal


@dataclass
class Compiles:
    """The search's compiles: how many, their seconds (wall clock, a cache read included) and
    the settings libtpu refused."""

    count: int = 0
    cached: int = 0
    seconds: float = 0.0
    refused: list[str] = field(default_factory=list)
    # a placed setting's compiled schedule played at the roofline (``simulated_s``), by knobs
    simulated: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        cache = f", {self.cached} read from the cache" if self.cached else ""
        return f"{self.count} compile{'s' * (self.count != 1)} in {self.seconds:.0f} s{cache}"


def compile_one(workload, preset: str, sets: dict, mesh_shape: str, tpu_chip: str,
                cache_dir: Path | None, log: Compiles, progress, label: str) -> float | None:
    """Compile ``sets`` (its knobs: ``label``) for ``tpu_chip``: None when it fits, else the
    bytes libtpu says the program is over (0 when its message does not say)."""
    from workloads.aot import HbmExhausted, start_compile

    progress(f"{label}: compiling for {tpu_chip} ...")
    t0 = time.perf_counter()
    try:
        aot = start_compile(workload.name, preset, sets, mesh_shape, tpu_chip=tpu_chip,
                            cache_dir=cache_dir).result()
    except HbmExhausted as e:
        log.count, log.seconds = log.count + 1, log.seconds + time.perf_counter() - t0
        progress(f"{label}: does not fit {tpu_chip} ({e})")
        try:
            return parse_refusal(str(e)).over_bytes
        except RefusalUnreadable:
            return 0.0
    log.count, log.seconds = log.count + 1, log.seconds + time.perf_counter() - t0
    log.cached += bool(getattr(aot, "cached", False))
    progress(f"{label}: fits {tpu_chip} ({time.perf_counter() - t0:.0f} s)")
    step = simulated_s(getattr(aot, "hlo_text", ""), tpu_chip)
    if step is not None:
        log.simulated[label] = step
    return None


def simulated_s(hlo_text: str, tpu_chip: str) -> float | None:
    """A compiled step's schedule played with every op at its roofline time on ``tpu_chip``
    (``harness.plan.predict``, as ``predict-hlo`` reports it): where the model's T = max(T_math,
    T_ici) assumes every collective hides under the compute, this one exposes what the
    schedule leaves exposed (a microbatched step's gradient reductions after its last
    microbatch); None without the program's text."""
    if not hlo_text:
        return None
    from harness.hlo import parse_module
    from harness.plan.predict import predict_module

    return float(predict_module(parse_module(hlo_text), tpu_chip).totals[schema.PREDICTED_STEP_S])


def retry(workload, cfg, mesh, given: Mapping[str, str], trial, need: float, over: float):
    """The same policy with the loss in more chunks, if the memory model saves ``over`` bytes
    by it (None: no chunking does)."""
    if over <= 0:
        return None
    again = next((t for t in workload.fit_trials(cfg, mesh, need - over, given)
                  if t.policy == trial.policy), None)
    if again is None:
        return None
    return again if again.need_bytes <= need - over and again.sets != trial.sets else None


def host_budget(tpu_chip: str) -> float | None:
    from workloads import tpu

    return tpu.TOPOLOGIES[tpu_chip].host_bytes
