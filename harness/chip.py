"""Which chip a run is predicted for: a look-up (``resolve_chip``), and the run path's explicit
calibration step (``chip_for_run``: on a CPU host with no chip named, this host's calibrated
``cpu`` chip, scaled by the host's drift around the run, passed along as a value; the registry
is never changed). It happens before the analysis, which takes the chip as it is given.
"""
from __future__ import annotations

from harness import schema
from harness.calibrate import drift
from harness.calibrate.chip import cpu_chip_for_run
from predictions import hardware


def _first_device():
    import jax  # deferred: callers that pass a device never need jax

    return jax.devices()[0]


def resolve_chip(chip=None, device=None) -> tuple[object, list[str], dict]:
    """The chip to predict for, and notes about how it was chosen (a pure look-up).

    ``chip``: a name or a ``predictions.hardware.Chip``; None picks the chip of ``device`` (the
    first JAX device by default). Never measures anything and never changes the registry: a
    ``cpu`` entry is the one registered; ``chip_for_run`` calibrates it for a run.
    """
    device = _first_device() if device is None else device
    if chip is None:
        return hardware.chip_for(device), [], {}
    entry = hardware.chip_entry(chip)
    try:
        ran_on = hardware.chip_for(device).name
    except KeyError:  # a device kind the registry does not know: name it as JAX does
        ran_on = str(getattr(device, "device_kind", device))
    notes = [] if ran_on == entry.name else [
        f"predicted for {entry.name} but measured on {ran_on}: efficiencies compare two "
        f"machines (what {entry.name} should do against what this host did)"]
    return entry, notes, {}


def chip_for_run(chip=None, device=None, host_drift: dict | None = None
                 ) -> tuple[object, list[str], dict]:
    """``resolve_chip``, then the run path's explicit calibration step: with no chip named and
    a CPU device, the ``cpu`` chip is this host's calibration (``calibrate.cpu_chip_for_run``:
    the saved one, or a quick one measured and saved now), passed along as a value, its rates
    scaled by the run's drift factor when ``host_drift`` (the reference rates measured around
    the capture, ``harness.calibrate.drift``) is given. Returns (chip, notes, metadata to keep
    with the run: the calibration behind a ``cpu`` chip, the drift and its factor)."""
    entry, notes, meta = resolve_chip(chip, device)
    if chip is not None or entry.name != "cpu":
        return entry, notes, meta
    entry, notes, meta = _calibrated(notes)
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
