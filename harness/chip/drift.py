"""Host drift on a shared CPU host: one short reference kernel, timed the same way when the host
is calibrated, before and after each capture, so that a host running slower or faster than when
it was calibrated divides out of the run's efficiencies.

The reference: every device multiplies its own [n, n] @ [n, n] fp32 (``REFERENCE_N``) at once,
as a run's devices share the cores; the rate is FLOPs per device over the step's wall time,
best of ``REPEATS`` steps (best sustained: a step slowed by another process is not the host's
speed), before and after. ``factor`` is the run's reference rate over the calibration's, each
the best of its ten steps (five before, five after): the same statistic on both sides, and the
steadiest this host gave. Over five full calibrations in a row, the calibrated fp32 matmul rate
over the reference moved with sd 0.098 in ln when the reference was the best of the ten; 0.123
as the mean of the best before and the best after (what runs took until then); and 0.149 with
both taken right around the matmul programs. The run's ``cpu`` chip has its compute and memory
rates scaled by the factor (``scaled``), and the run's meta records both rates and the factor
(``HOST_DRIFT``).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time

from harness.chip.probes import BUILDERS, outside_user_mesh

log = logging.getLogger(__name__)

REFERENCE_N = 512
REPEATS = 5
HOST_DRIFT = "host_drift"  # run meta key: {REFERENCE: [before, after], FACTOR: factor}
REFERENCE = "reference_flops_per_s"  # also the calibration record's field of the same rate
FACTOR = "factor"
RATES = "rates"  # every repeat's rate: [[before...], [after...]] (harness compare's host speed)
CPU_RATES = "cpu_rates"  # the same repeats' FLOPs per CPU second: the cores' own speed
BUSY_SPREAD = 1.5  # repeats slower than best / this: the host was busy while measuring
# The cores' own speed (the reference's best FLOPs per CPU second of three steps) moving more
# than this between checks: the calibration's figures mix two speeds. Measured on the 2-core
# development host with nothing else running: 40-50 GFLOP per CPU second in spells of 1-2 s
# (or whole processes), 70-90 otherwise; checks 0.2 s apart within one speed agree within 1.15.
CORE_SPREAD = 1.3


def _timed(devices, n: int, repeats: int) -> tuple[list[float], list[float]]:
    """The reference kernel on ``devices`` (default: all), ``repeats`` steps timed end to end:
    (FLOP/s per device, FLOPs per second of the process's CPU time) of each."""
    import jax

    devices = list(devices or jax.devices())
    rates, cpu_rates = [], []
    with outside_user_mesh():  # the probe's own mesh, whatever the caller's context
        prog = BUILDERS["matmul"](devices, "fp32", n, 1)
        jax.block_until_ready(prog.fn(*prog.args))  # compile and warm
        for _ in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(prog.fn(*prog.args))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rates.append(prog.work / wall)
            cpu_rates.append(prog.work * len(devices) / cpu if cpu > 0 else math.nan)
    return rates, cpu_rates


def reference_rates(devices=None, n: int = REFERENCE_N, repeats: int = REPEATS) -> list[float]:
    """Per-step FLOP/s per device of the reference kernel on ``devices`` (default: all): the
    calibration's own fp32 matmul program (``programs.BUILDERS["matmul"]``), timed end to end."""
    return _timed(devices, n, repeats)[0]


def core_speed(devices, repeats: int = 3) -> float:
    """The cores' speed now: the reference kernel's best FLOPs per CPU second over ``repeats``
    steps (about 0.2 s on 8 devices), which other processes taking the cores do not lower and
    slower cores do."""
    return max(_timed(devices, REFERENCE_N, repeats)[1])


def probe(devices) -> tuple[list[float], list[float]] | None:
    """The host speed probe around a run: ``_timed`` on ``devices`` when they are the host's
    CPU; None elsewhere (it measures the host that a CPU run's devices share). Its FLOP/s fall
    when the cores are slower or other processes take a share of them, its FLOPs per CPU
    second only when the cores are slower."""
    devices = list(devices)
    if not devices or devices[0].platform != "cpu":
        return None
    return _timed(devices, REFERENCE_N, REPEATS)


def record(before, after) -> dict | None:
    """The run's ``HOST_DRIFT`` measurement from the probes before and after it (None without
    them): each side's best rate, and every rate and CPU rate."""
    if not before or not after:
        return None
    return {REFERENCE: [max(before[0]), max(after[0])], RATES: [before[0], after[0]],
            CPU_RATES: [before[1], after[1]]}


def spread(rates) -> float:
    """Best rate over median rate (1.0: steady; above ``BUSY_SPREAD``: a busy host)."""
    rates = sorted(r for r in rates if r > 0)
    return rates[-1] / rates[len(rates) // 2] if rates else math.nan


def factor(calibrated: float, before: float, after: float) -> float:
    """How much faster the host ran around the capture than when calibrated (NaN if unknown):
    the better of the rates before and after (each a best of ``REPEATS``) over the
    calibration's best (of its rates before and after)."""
    if not (calibrated and calibrated > 0 and before > 0 and after > 0):
        return math.nan
    return max(before, after) / calibrated


def scaled(chip, f: float):
    """``chip`` with its compute (each kernel's too), memory (each tier's too) and software
    rates multiplied by ``f`` and its per-op overhead divided by it (collectives unchanged: they
    measure thread rendezvous, not arithmetic)."""
    return dataclasses.replace(
        chip, peak_flops=tuple((d, v * f) for d, v in chip.peak_flops),
        hbm_bytes_per_s=chip.hbm_bytes_per_s * f,
        software_bytes_per_s=tuple((k, v * f) for k, v in chip.software_bytes_per_s),
        op_overhead_s=chip.op_overhead_s / f,
        kernel_flops=tuple((k, d, tuple((size, r * f) for size, r in pts))
                           for k, d, pts in chip.kernel_flops),
        memory_tiers=tuple((capacity, w * f) for capacity, w in chip.memory_tiers))


def apply(chip, calibration: dict | None, host: dict | None):
    """(chip, factor, note): the run's ``cpu`` chip with its rates scaled by the run's drift
    factor, from the calibration record behind the chip and the run's ``HOST_DRIFT`` meta. The
    chip unchanged and a NaN factor when either is missing, or when the host's speed moved more
    than ``BUSY_SPREAD`` between before and after (then no single factor describes the run; the
    note says so)."""
    rates = (host or {}).get(REFERENCE) or []
    cal = (calibration or {}).get(REFERENCE, 0.0)
    f = factor(cal, *rates) if len(rates) == 2 else math.nan
    if not math.isfinite(f):
        return chip, math.nan, ""
    if max(rates) / min(rates) > BUSY_SPREAD:
        return chip, math.nan, (f"host speed moved {max(rates) / min(rates):.1f}x during this "
                                "run (a reference matmul before and after): no drift factor "
                                "applied; efficiencies may be off by as much")
    return scaled(chip, f), f, (f"host ran at {f:.2f}x its calibrated speed around this run (a "
                                "reference matmul before and after): cpu compute, memory, convert "
                                "rates and per-op overhead scaled by it")
