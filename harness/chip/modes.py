"""The calibration's modes (``harness calibrate`` quick or full): the probes' sizes of each
(``Sizes``, ``MODES``) and every program a mode runs (``tasks``), built by ``harness.chip.probes``.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.chip.probes import CONVERT_ELEMENTS, DTYPES, MATMULS, OVERHEAD_ELEMENTS, RING


@dataclass(frozen=True)
class Sizes:
    """Per-device sizes: matmul n ([n,n] @ [n,n], every layout in ``MATMULS`` with all devices
    busy; one device alone, the largest), stream f32 elements (working sets from the caches to
    main memory), collective bytes V (``predictions.collectives`` convention); ``chain``:
    dependent collectives per program."""

    matmul_n: tuple[int, ...]
    stream_elements: tuple[int, ...]
    latency_bytes: tuple[int, ...]
    bandwidth_bytes: tuple[int, ...]
    steps: int
    chain: int


MODES: dict[str, Sizes] = {
    "quick": Sizes((16, 128, 512), (1 << 14, 1 << 17, 1 << 22), (256,), (4 << 20,), steps=3,
                  chain=4),
    "full": Sizes((16, 32, 64, 128, 256, 512, 1024), (1 << 11, 1 << 14, 1 << 17, 1 << 20, 1 << 23),
                 (8, 256, 4096), (1 << 20, 4 << 20, 16 << 20), steps=5, chain=8),
}


def tasks(sizes: Sizes, n: int) -> list[tuple[str, str, str, int, str, int]]:
    """(kind, scope, dtype, size, role, devices) of every program a calibration of ``sizes``
    runs. One device alone: the largest stream and matmul (a figure to set beside the all-busy
    one); all N busy: every size and matmul layout, since the ``cpu`` chip prices a run's ops
    from these."""
    out = []
    for scope, k, g in (("one", 1, 2), ("all", n, n)):
        every = scope == "all"
        if n >= 2:
            out += [(kind, scope, "fp32", s, role, g) for kind in RING
                    for role, each in (("latency", sizes.latency_bytes),
                                       ("bandwidth", sizes.bandwidth_bytes)) for s in each]
        out += [("stream", scope, "fp32", s, "peak", k)
                for s in (sizes.stream_elements if every else sizes.stream_elements[-1:])]
        out += [("convert", scope, "bf16", CONVERT_ELEMENTS, "peak", k)]
        out += [("stream", scope, "fp32", s, "overhead", k) for s in OVERHEAD_ELEMENTS if k > 1]
        # matmuls last, fp32 first: a bf16 program that XLA runs on f32 copies through a
        # kernel measured already is skipped (``measure_kernel``)
        out += [(kind, scope, dt, s, "peak", k) for dt in DTYPES
                for kind in (MATMULS if every else ("matmul",))
                for s in (sizes.matmul_n if every else sizes.matmul_n[-1:])]
    return out
