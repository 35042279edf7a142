"""How each GPU of the registry describes itself in a profile, to tell it from the others.

A trace's ``/device:GPU:n`` planes carry the stats ``device_vendor``, ``compute_cap_major`` /
``compute_cap_minor``, ``core_count`` (SMs or CUs), ``clock_rate`` and ``memory_size``; NVIDIA
planes also name the GPU (``gpu_device_name``, matched by ``hardware.DEVICE_KINDS``), AMD planes
do not. ``GPU_IDS`` gives, per registry chip, what its planes say; the memory size is compared
with the chip's own ``hbm_bytes``. ``None``: a figure not used to tell chips apart.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuId:
    """``vendor``: ``device_vendor`` lower-cased. ``compute_capability``: (major, minor) as the
    profiler reports it (ROCm: the gfx target's version, gfx942 -> (9, 4)). ``compute_units``:
    SMs / CUs. ``clock_hz``: the peak engine (boost) clock."""

    vendor: str
    compute_capability: tuple[int, int]
    compute_units: int | None = None
    clock_hz: float | None = None


GPU_IDS: dict[str, GpuId] = {
    # NVIDIA A100 / H100 architecture white papers: A100 108 SMs, compute capability 8.0;
    # H100 SXM5 132 SMs, 9.0; H200 is the same GH100 part with more memory (told apart by it);
    # B200 compute capability 10.0 (CUDA C++ programming guide, compute capabilities table).
    "a100": GpuId("nvidia", (8, 0), 108),
    "h100": GpuId("nvidia", (9, 0), 132),
    "h200": GpuId("nvidia", (9, 0), 132),
    "b200": GpuId("nvidia", (10, 0)),
    # ROCm "GPU hardware specifications" table and AMD's data sheets: MI300X and MI325X are
    # gfx942 with 304 CUs at 2100 MHz (told apart by memory, 192 vs 256 GB); MI350X and MI355X
    # gfx950 with 256 CUs and 288 GB, at 2200 and 2400 MHz (told apart by the clock only).
    "mi300x": GpuId("amd", (9, 4), 304, 2.1e9),
    "mi325x": GpuId("amd", (9, 4), 304, 2.1e9),
    "mi350x": GpuId("amd", (9, 5), 256, 2.2e9),
    "mi355x": GpuId("amd", (9, 5), 256, 2.4e9),
}
