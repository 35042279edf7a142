"""Which chip a run is predicted for: a look-up (``resolve_chip``), the chip a trace's device
planes describe (``chip_from_device``), and the run path's explicit calibration step
(``chip_for_run``: on a CPU host with no chip named, this host's calibrated ``cpu`` chip, scaled
by the host's drift around the run, passed along as a value; the registry is never changed). It
happens before the analysis, which takes the chip as it is given. Each records where the chip
came from (meta ``chip_source``: ``FLAG``, ``TRACE`` or ``DEVICE``).
"""
from __future__ import annotations

import math
from collections.abc import Callable

from harness import schema
from harness.chip import drift
from harness.chip.calibration import cpu_chip_for_run
from harness.errors import HarnessError
from harness.trace.device import Device, trace_device
from harness.units import fmt_si
from predictions import hardware
from predictions.gpu_ids import GPU_IDS

FLAG, TRACE, DEVICE = "flag", "trace", "device"  # the values of meta chip_source


def _first_device():
    import jax  # deferred: callers that pass a device never need jax

    return jax.devices()[0]


def resolve_chip(chip=None, device=None) -> tuple[object, list[str], dict]:
    """The chip to predict for, and notes about how it was chosen (a pure look-up).

    ``chip``: a name or a ``predictions.hardware.Chip``; None picks the chip of ``device`` (the
    first JAX device by default; a trace's ``harness.trace.device.Device``: ``chip_from_device``).
    Never measures anything and never changes the registry: a ``cpu`` entry is the one
    registered; ``chip_for_run`` calibrates it for a run.
    """
    if isinstance(device, Device):
        return _for_trace(chip, device)
    device = _first_device() if device is None else device
    if chip is None:
        return hardware.chip_for(device), [], {schema.CHIP_SOURCE: DEVICE}
    entry = hardware.chip_entry(chip)
    try:
        ran_on = hardware.chip_for(device).name
    except KeyError:  # a device kind the registry does not know: name it as JAX does
        ran_on = str(getattr(device, "device_kind", device))
    notes = [] if ran_on == entry.name else [_elsewhere(entry.name, ran_on)]
    return entry, notes, {schema.CHIP_SOURCE: FLAG}


def _elsewhere(chip_name: str, ran_on: str, short: str | None = None) -> str:
    return (f"predicted for {chip_name} but measured on {ran_on}: efficiencies compare two "
            f"machines (what {chip_name} should do against what {short or ran_on} did)")


def _for_trace(chip, device: Device) -> tuple[object, list[str], dict]:
    """``resolve_chip`` for a trace: the chip named (noted against the trace's own device,
    never this host), else the one its device planes describe (HarnessError when none)."""
    found, notes, meta = chip_from_device(device)
    if chip is None:
        if found is None:
            raise HarnessError(notes[0])
        return found, notes, meta
    entry = hardware.chip_entry(chip)
    if found is not None and found.name == entry.name:
        return entry, [], {schema.CHIP_SOURCE: FLAG}
    ran_on = f"{device.label} ({found.name})" if found is not None else device.label
    return entry, [_elsewhere(entry.name, ran_on, found.name if found else None)], {
        schema.CHIP_SOURCE: FLAG}


# --- the chip of a trace's device planes (harness.trace.device) ----------------------------
MEMORY_TOLERANCE = 0.05  # a device reports its memory in GiB less a reserve (80 GB H100: 79.2)
CLOCK_TOLERANCE = 0.02


def _same(measured: float | None, listed: float | None, tol: float) -> bool | None:
    """Whether a figure the trace gives matches the listed one; None when either is missing."""
    if not measured or not listed:
        return None
    return abs(measured - listed) <= tol * listed


# Tests that narrow a GPU's candidates, in order: True keeps, False drops, None cannot tell.
NARROW: dict[str, Callable[[Device, str], bool | None]] = {
    "compute units": lambda d, n: None if not d.core_count or GPU_IDS[n].compute_units is None
    else d.core_count == GPU_IDS[n].compute_units,
    "memory": lambda d, n: _same(d.memory_bytes and d.memory_bytes / 2**30,
                                 hardware.CHIPS[n].hbm_bytes / 1e9, MEMORY_TOLERANCE),
    "clock": lambda d, n: _same(d.clock_hz, GPU_IDS[n].clock_hz, CLOCK_TOLERANCE),
}


def _candidates(device: Device) -> list[str]:
    """Registry chips the device could be: by its name (TPU type string, NVIDIA device name),
    else by vendor and compute capability narrowed by ``NARROW``."""
    if device.name:
        try:
            return [hardware.chip_for(device.name).name]
        except KeyError:
            pass
    vendor = (device.vendor or "").lower()
    if device.platform != "gpu" or not vendor or device.compute_capability is None:
        return []
    names = [n for n, i in GPU_IDS.items()
             if i.vendor == vendor and i.compute_capability == device.compute_capability]
    for test in NARROW.values():
        names = [n for n in names if test(device, n) is not False]
    return names


def chip_from_device(device: Device | None) -> tuple[object | None, list[str], dict]:
    """The chip a trace's device planes describe: (Chip or None, notes, meta to keep).

    A registry chip when the planes identify one; for a device the registry lacks, a chip made
    of the trace's own peaks where its planes give them (TPU planes); else None, with a note
    naming the device. None and no notes for a trace without accelerator planes."""
    if device is None:
        return None, [], {}
    names = _candidates(device)
    if len(names) == 1:
        entry = hardware.chip(names[0])
        return entry, [f"chip {entry.name} from the trace's device planes ({device.label})"], {
            schema.CHIP_SOURCE: TRACE}
    if not names and device.peak_flops_per_s and device.peak_hbm_bytes_per_s:
        entry = _from_peaks(device)
        return entry, [
            f"chip {entry.name}: not in the registry; peaks from the trace's device plane "
            f"({fmt_si(device.peak_flops_per_s, 'FLOP/s')}, "
            f"HBM {fmt_si(device.peak_hbm_bytes_per_s, 'B/s')}); its interconnect is not given, "
            f"so collectives are predicted as free"], {
            schema.CHIP_SOURCE: TRACE}
    why = (f"which could be {' or '.join(names)} (its planes do not tell them apart)" if names
           else "which is not a chip the registry knows, and its planes give no peak FLOP/s")
    return None, [f"measured only: the trace ran on {device.label}, {why}; give --chip (one "
                  f"of {', '.join(hardware.CHIPS)})"], {}


def chip_from_trace(space) -> tuple[object | None, list[str]]:
    """The chip a trace's device planes describe (``chip_from_device``), and its notes (one
    naming the device when there is no chip); ``space``: the trace's decoded XSpace."""
    found, notes, _ = chip_from_device(trace_device(space))
    return found, notes


def _from_peaks(device: Device):
    """A chip of the trace's own peak FLOP/s (the MXU's bf16 peak on TPU planes) and HBM
    bandwidth; what the planes do not give is left out (memory NaN, free interconnect)."""
    return hardware.Chip(
        device.label, kind=device.platform,
        description=f"{device.label} (peaks from the trace's device plane)",
        peak_flops=(("bf16", device.peak_flops_per_s),),
        hbm_bytes=float(device.memory_bytes or math.nan),
        hbm_bytes_per_s=device.peak_hbm_bytes_per_s, ici_bytes_per_s=math.inf, ici_links=1,
        torus_dims=0, max_slice=(), wrap_rule="always", hop_latency_s=0.0,
        chips_per_node=max(device.count, 1))


def chip_for_run(chip=None, device=None, host_drift: dict | None = None
                 ) -> tuple[object, list[str], dict]:
    """``resolve_chip``, then the run path's explicit calibration step: with no chip named and
    a CPU device, the ``cpu`` chip is this host's calibration (``calibrate.cpu_chip_for_run``:
    the saved one, or a quick one measured and saved now), passed along as a value, its rates
    scaled by the run's drift factor when ``host_drift`` (the reference rates measured around
    the capture, ``harness.chip.drift``) is given. Returns (chip, notes, metadata to keep
    with the run: the calibration behind a ``cpu`` chip, the drift and its factor)."""
    entry, notes, meta = resolve_chip(chip, device)
    if chip is not None or entry.name != "cpu":
        return entry, notes, meta
    entry, notes, calibrated = _calibrated(notes)
    meta = {**meta, **calibrated}
    if host_drift:
        entry, f, note = drift.apply(entry, meta.get(schema.CALIBRATION), host_drift)
        meta[drift.HOST_DRIFT] = {**host_drift, drift.FACTOR: f}
        notes += [note] if note else []
    return entry, notes, meta


def _calibrated(notes: list[str]) -> tuple[object, list[str], dict]:
    """This host's calibrated ``cpu`` chip, with the notes and metadata a CPU run carries."""
    import jax  # deferred with the calibration, which runs JAX programs

    # this process's devices: a multi-process job cannot run programs on the others'
    entry, cal, measured = cpu_chip_for_run(jax.local_device_count())
    meta = {schema.CALIBRATION: {k: v for k, v in cal.to_dict().items() if k != "samples"}}
    if measured:
        notes.append("cpu chip: no saved calibration for this host; ran a quick one "
                     "(`harness calibrate` measures a full one)")
    notes.append("CPU run: the virtual devices share the host's cores, so collectives "
                 "mostly measure rendezvous skew between device threads, not a network")
    return entry, notes, meta
