"""The ``cpu`` chip a calibration (``harness.chip.calibration.Calibration``) makes: its
all-devices-busy figures as a ``predictions.hardware.Chip``, passed along as a value (the
registry keeps its placeholder)."""
from __future__ import annotations

import os

from harness.chip.probes import DTYPES
from harness.errors import HarnessError
from predictions import hardware
from predictions.hardware import Chip

_PLACEHOLDER = hardware.CHIPS["cpu"]  # as shipped, before a calibration replaces it


def to_chip(cal) -> Chip:
    """The ``cpu`` chip from the all-devices-busy figures (``harness run`` runs all N at once).

    Collectives: the faster of all-reduce and all-gather (bandwidth max, latency min), so the
    prediction stays a lower bound on time; with one device none runs and the placeholder's ring
    figures stay. Memory capacity: the host's RAM shared N ways. The calibration's spread (how
    far the cores moved speed while it measured, ``harness.chip.spells``) goes with the chip:
    its figures carry it.
    """
    f, n, base = cal.all, cal.device_count, _PLACEHOLDER
    try:
        ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        ram = base.hbm_bytes * base.chips_per_node
    fp32 = f.flops_per_s.get("fp32")
    kernel_flops = tuple((*key.rsplit(" ", 1), tuple(tuple(p) for p in pts))
                         for key, pts in f.kernel_flops_per_s.items())
    numbers = [("fp32 matmul FLOP/s", fp32), ("memory bandwidth", f.memory_bytes_per_s),
               *((f"{k} matmul FLOP/s", v) for k, v in f.flops_per_s.items()),
               *((f"{k} bandwidth", v) for k, v in f.collective_bytes_per_s.items()),
               *((f"{k} latency", v) for k, v in f.collective_latency_s.items())]
    bad = [k for k, v in numbers if not isinstance(v, (int, float)) or not v > 0]
    if bad:
        raise HarnessError(f"calibration of {cal.host} ({cal.time}) has no positive "
                           f"{', '.join(map(str, bad))}; run `harness calibrate` again")
    return Chip(
        "cpu", kind="cpu", description=(f"{cal.cpu_model}: {n} virtual devices on {cal.cores} "
                                        f"cores, calibrated {cal.time} ({cal.mode})"),
        peak_flops=tuple((dt, f.flops_per_s.get(dt, fp32)) for dt in DTYPES),
        hbm_bytes=ram / n, hbm_bytes_per_s=f.memory_bytes_per_s,
        ici_bytes_per_s=max(f.collective_bytes_per_s.values(), default=base.ici_bytes_per_s),
        ici_links=1, torus_dims=1, max_slice=(), wrap_rule="always",
        hop_latency_s=min(f.collective_latency_s.values(), default=base.hop_latency_s),
        chips_per_node=n, software_bytes_per_s=(
            (("convert", f.convert_bytes_per_s),) if f.convert_bytes_per_s > 0 else ()),
        op_overhead_s=f.op_overhead_s, memory_tiers=tuple(tuple(t) for t in f.memory_tiers),
        kernel_flops=kernel_flops, spread=cal.spread)
