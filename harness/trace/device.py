"""What a trace says about the hardware that ran it: the stats of its device planes.

The profiler writes each accelerator as a plane ``/device:TPU:<n>`` or ``/device:GPU:<n>`` whose
plane-level stats describe it. Read here by stat name (``STATS``), never from file names:

- TPU (xprof): ``device_type_string`` ("TPU v6 Lite"), ``peak_teraflops_per_second`` (the bf16
  MXU peak) and ``peak_hbm_bw_gigabytes_per_second``;
- GPU (XLA's CUDA and ROCm tracers): ``device_vendor`` ("Nvidia", "AMD"), ``gpu_device_name``
  (NVIDIA only), ``compute_cap_major`` / ``compute_cap_minor`` (ROCm: the gfx target, gfx942 ->
  9.4), ``core_count`` (SMs / CUs), ``memory_size`` (bytes), ``memory_bandwidth`` (bytes/s, as
  the tracer computes it: on the MI300X traces 2.66e12, half AMD's 5.3e12, so it is kept as
  said, never taken for a peak) and ``clock_rate`` (kHz).

``trace_device(space)`` gathers them into one ``Device`` record (None when the trace has no
accelerator plane, e.g. a CPU trace). ``harness.chip.resolve.chip_from_device`` turns it into a
chip.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from harness.trace.space import Space
from harness.units import fmt_bytes

DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):\d+$")
CORES = {"amd": "CUs", "nvidia": "SMs"}  # what each vendor calls the cores of core_count


@dataclass(frozen=True)
class Device:
    """One trace's accelerator, as its device planes describe it (SI units; None: not given).

    ``platform``: "tpu" or "gpu" (from the plane name). ``name``: the TPU type string or the
    NVIDIA device name. ``peak_flops_per_s`` / ``peak_hbm_bytes_per_s``: the trace's own peaks
    (TPU planes). ``count``: the device planes in the trace.
    """

    platform: str
    count: int = 1
    vendor: str | None = None
    name: str | None = None
    compute_capability: tuple[int, int] | None = None
    core_count: int | None = None
    memory_bytes: int | None = None
    memory_bytes_per_s: float | None = None
    clock_hz: float | None = None
    peak_flops_per_s: float | None = None
    peak_hbm_bytes_per_s: float | None = None

    @property
    def label(self) -> str:
        """How a report names the device: its own name, else what its planes give
        ("AMD GPU, compute capability 9.4, 304 CUs, 192 GiB")."""
        if self.name:
            return self.name
        parts = [f"{self.vendor or 'unnamed'} {self.platform.upper()}"]
        if self.compute_capability:
            parts.append("compute capability {}.{}".format(*self.compute_capability))
        if self.core_count:
            parts.append(f"{self.core_count} {CORES.get((self.vendor or '').lower(), 'cores')}")
        if self.memory_bytes:
            parts.append(fmt_bytes(self.memory_bytes, decimals=0))
        return ", ".join(parts)


def _scaled(factor: float) -> Callable[[object], float]:
    return lambda v: float(v) * factor


# stat name -> (Device field, conversion to SI units)
STATS: dict[str, tuple[str, Callable[[object], object]]] = {
    "device_vendor": ("vendor", str),
    "device_type_string": ("name", str),   # TPU
    "gpu_device_name": ("name", str),      # NVIDIA
    "device_kind": ("name", str),
    "core_count": ("core_count", int),
    "memory_size": ("memory_bytes", int),
    "memory_bandwidth": ("memory_bytes_per_s", float),
    "clock_rate": ("clock_hz", _scaled(1e3)),  # kHz
    "peak_teraflops_per_second": ("peak_flops_per_s", _scaled(1e12)),
    "peak_hbm_bw_gigabytes_per_second": ("peak_hbm_bytes_per_s", _scaled(1e9)),
}
_CAPABILITY = ("compute_cap_major", "compute_cap_minor")


def plane_stats(plane) -> dict[str, object]:
    """A plane's own stats by name (``ref_value`` stats resolve to the name they refer to)."""
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    out = {}
    for st in plane.stats:
        kind = st.WhichOneof("value")
        if kind:
            out[names.get(st.metadata_id, "")] = (names.get(st.ref_value, "")
                                                  if kind == "ref_value" else getattr(st, kind))
    return out


def _device(platform: str, stats: dict[str, object]) -> Device:
    found = {}
    for stat, (name, convert) in STATS.items():
        value = stats.get(stat)
        if value not in (None, "", 0) and name not in found:
            found[name] = convert(value)
    if all(stats.get(k) is not None for k in _CAPABILITY):
        found["compute_capability"] = tuple(int(stats[k]) for k in _CAPABILITY)
    return Device(platform=platform, **found)


def trace_device(space: Space) -> Device | None:
    """The accelerator of a trace: the first device plane that describes itself (all of one
    trace's planes describe the same chip), with the number of device planes. None when the
    trace has no ``/device:TPU:n`` or ``/device:GPU:n`` plane. A trace read from elsewhere
    than an XSpace names its own (``harness.trace.chrome.ChromeTrace.device``)."""
    if isinstance(getattr(space, "device", None), Device):
        return space.device
    planes = [p for p in space.planes if DEVICE_PLANE.match(p.name)]
    if not planes:
        return None
    described = [_device(DEVICE_PLANE.match(p.name).group(1).lower(), plane_stats(p))
                 for p in planes]
    empty = {f.name for f in fields(Device)} - {"platform", "count"}
    best = next((d for d in described if any(getattr(d, f) is not None for f in empty)),
                described[0])
    return replace(best, count=len(planes))
