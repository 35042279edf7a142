"""A calibration's rates from its samples: per scope (one device alone, all N busy), the rates
the ``cpu`` chip is made of.

A roof is a lower bound on time, so every rate is the best seen (each sample is already its
program's best step) and the per-op overhead the smallest. The chip adds the overhead to every
op's roofline time (``predictions.roofline.combine``), so a rate is the work over the time left
after it: a stream or matmul measured at t prices back at t, not at t plus the overhead.

- matmuls: per kernel (``Sample.kernel``, read from the probe's compiled HLO) and compute dtype,
  the rate at each size (FLOPs per execution); the generic rate per dtype is the best of them;
- memory: the bandwidth at each working set (bytes moved per op), cache-resident to main
  memory, made non-increasing with size (a larger working set never prices faster), as memory
  tiers (``Chip.memory_tiers``): an op moving up to the next measured size's bytes is priced at
  the rate of the size below it; main memory (``memory_bytes_per_s``) at the largest size.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from harness.chip.probes import DTYPES, RING, Sample

# A size whose time is mostly the per-op overhead says nothing of its rate: kept only when the
# work takes at least this share of its time.
MIN_WORK_SHARE = 0.2


@dataclass(frozen=True)
class Rates:
    """Per-device rates of one scope: ``devices`` busy for compute, ``group`` for collectives.

    ``kernel_flops_per_s``: "kernel dtype" -> [[FLOPs per execution, FLOP/s], ...] by size;
    ``memory_tiers``: [[bytes up to, bytes/s], ...] smallest first (``Chip.memory_tiers``)."""

    devices: int
    group: int
    flops_per_s: dict[str, float] = field(default_factory=dict)
    flops_per_s_wall: dict[str, float] = field(default_factory=dict)
    memory_bytes_per_s: float = 0.0
    memory_bytes_per_s_wall: float = 0.0
    collective_bytes_per_s: dict[str, float] = field(default_factory=dict)
    collective_latency_s: dict[str, float] = field(default_factory=dict)
    convert_bytes_per_s: float = 0.0  # bf16 -> f32 converts (software on most CPUs)
    op_overhead_s: float = 0.0  # a tiny op's time: the runtime's fixed cost per execution
    kernel_flops_per_s: dict[str, list[list[float]]] = field(default_factory=dict)
    memory_tiers: list[list[float]] = field(default_factory=list)


def kernel_key(kernel: str, dtype: str) -> str:
    """The ``kernel_flops_per_s`` key of a kernel at a dtype: "ynn_fusion fp32"."""
    return f"{kernel} {dtype}"


def _rate(s: Sample, overhead: float) -> float | None:
    """Work per second of the time left after the per-op overhead; None when the overhead is
    most of the time (``MIN_WORK_SHARE``)."""
    left = s.op_s - overhead
    return s.work / left if left >= MIN_WORK_SHARE * s.op_s else None


def _by_size(samples, overhead: float) -> list[list[float]]:
    """[[size, best rate], ...] ascending by work per op."""
    best: dict[float, float] = {}
    for s in samples:
        r = _rate(s, overhead)
        if r:
            best[s.work] = max(r, best.get(s.work, 0.0))
    return [[w, best[w]] for w in sorted(best)]


def _tiers(points: list[list[float]]) -> list[list[float]]:
    """Memory tiers from [[bytes, bandwidth], ...] ascending: each size's rate made the best at
    it or any larger size, good up to the next size's bytes; the largest size is main memory."""
    out, best = [], 0.0
    for (_, w), (nxt, _) in reversed(list(zip(points, points[1:]))):
        best = max(best, w, points[-1][1])
        out.append([nxt, best])
    return out[::-1]


def rates(samples, scope: str, devices: int, group: int) -> Rates:
    """Per-device rates of ``scope``; collectives by inverting the ring model
    (t_bw = RING*V*(g-1)/(g*W) on large messages, t_lat = RING*(g-1)*h on small ones), the
    median over sizes (they measure rendezvous more than bandwidth: no roof to take)."""
    mine = [s for s in samples if s.scope == scope]

    def of(role, kind):
        return [s for s in mine if (s.role, s.kind) == (role, kind)]

    def med(role, kind, f):
        v = [f(s) for s in of(role, kind)]
        return statistics.median(v) if v else None

    overheads = [s.op_s for s in of("overhead", "stream")]
    overhead = min(overheads, default=0.0)
    matmuls = [s for s in mine if s.role == "peak" and s.kind.startswith("matmul")]
    kernels: dict[str, list[list[float]]] = {}
    for key in dict.fromkeys(kernel_key(s.kernel or s.kind, s.dtype) for s in matmuls):
        pts = _by_size([s for s in matmuls if kernel_key(s.kernel or s.kind, s.dtype) == key],
                       overhead)
        if pts:
            kernels[key] = pts
    generic = {dt: max(r for k, pts in kernels.items() if k.endswith(f" {dt}") for _, r in pts)
               for dt in DTYPES if any(k.endswith(f" {dt}") for k in kernels)}
    wall = {dt: max(s.work / s.span_s for s in matmuls if s.dtype == dt)
            for dt in DTYPES if any(s.dtype == dt for s in matmuls)}
    stream = _by_size(of("peak", "stream"), overhead)
    g = group
    return Rates(
        devices, group, generic, wall, stream[-1][1] if stream else 0.0,
        max((s.work / s.span_s for s in of("peak", "stream")), default=0.0),
        {k: v for k in RING if (v := med("bandwidth", k, lambda s, r=RING[k]:
                                         r * s.work * (g - 1) / (g * s.op_s)))},
        {k: v for k in RING if (v := med("latency", k, lambda s, r=RING[k]:
                                         s.op_s / (r * (g - 1))))},
        max((r for _, r in _by_size(of("peak", "convert"), overhead)), default=0.0),
        overhead, kernels, _tiers(stream))
