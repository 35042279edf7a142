"""The ``cpu`` chip, measured: this host's achievable peaks with XLA itself.

No data sheet describes N virtual XLA devices sharing a few host cores, so the ``cpu`` entry of
``predictions.hardware`` is measured: matmul FLOP/s per dtype, streaming memory bandwidth, and
collective bandwidth and per-hop latency (the ring model of ``predictions.collectives``), each for
one device alone (collectives: a pair) and for all N devices busy at once; plus two figures the
book's chips do without: the rate of bf16 <-> f32 converts (done in software by most CPUs) and
the fixed cost of one op execution (a tiny in-place op's time: the runtime's dispatch). Matmuls
are measured per kernel XLA:CPU compiles them to (read from each probe's HLO) and size, memory
by working set (``harness.chip.rates``).

Every figure is a per-op time from the XLA profiler, through the ``capture -> load_events``
pipeline ``harness run`` uses, since that is what predictions are compared with. Concurrent
executions on shared cores start staggered, so an op takes less than its step's wall-clock span;
the ``*_wall`` figures (work / step span, nearer total / N) show by how much. Per op: median over
devices within a step, best step (an achievable peak), median over sizes. Memory: ``x * a + b``
in place (donated) on arrays far beyond the last-level cache; a fresh result buffer would add
first-touch page faults that come and go with the allocator's reuse.

Caveat, written into every record (``note``): the devices are threads on shared cores, so "all"
figures are per device with the cores shared N ways, and collective figures measure thread
rendezvous and the skew between device threads, not a network.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.chip import drift, host, spells
from harness.chip.cache import CACHE_ENV, cache_path, cache_root  # noqa: F401 (re-exported)
from harness.chip.cpu_chip import to_chip
from harness.chip.host import usable_cores  # noqa: F401 (re-exported)
from harness.chip.kernel_probes import measure_kernel
from harness.chip.modes import MODES, tasks
from harness.chip.probes import (  # noqa: F401 (RING re-exported)
    DTYPES,
    MATMULS,
    RING,
    Sample,
    measure,
)
from harness.chip.rates import Rates, kernel_key, rates  # noqa: F401 (re-exported)
from harness.errors import HarnessError, TraceError
from predictions.hardware import Chip

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

log = logging.getLogger(__name__)

# 2: the per-op overhead; 3: the matmul rate as host shares; 4: matmul rates per kernel and
# size, bandwidth per working set (older: measured again)
FORMAT = 4
NOTE = ("{n} virtual devices share {cores} host cores: 'all' figures are per device with every "
        "device busy at once; collective figures measure thread rendezvous and skew between "
        "device threads on a shared-core host, not a network")


@dataclass(frozen=True)
class Calibration:
    """This host measured for ``device_count`` devices; ``to_dict`` is its JSON form."""

    host: str
    cpu_model: str
    cores: int
    device_count: int
    jax_version: str
    jaxlib_version: str
    time: str
    mode: str  # a MODES key (harness.chip.modes)
    seconds: float
    note: str
    one: Rates
    all: Rates
    samples: tuple[Sample, ...] = ()
    format: int = FORMAT
    # harness.chip.drift's reference kernel, best rate around the calibration (0: not
    # measured, an older record) and best / median over its repeats (the host's steadiness)
    reference_flops_per_s: float = 0.0
    reference_spread: float = 0.0
    # the cores' speed (``drift.core_speed``) checked before, between and after the matmul
    # probes: [slowest, fastest] FLOPs per CPU second ([]: not checked, an older record)
    core_speed: tuple[float, ...] = ()
    # fastest / slowest of those checks: the spread every figure priced from this record
    # carries (``harness.chip.spells``; 0: not checked), and how many matmul probes ran again
    # because they were measured in a slower spell
    spread: float = 0.0
    repeats: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        return cls(**{**d, "one": Rates(**d["one"]), "all": Rates(**d["all"]),
                      "samples": tuple(Sample(**s) for s in d.get("samples", ())),
                      "core_speed": tuple(d.get("core_speed", ())),
                      "spread": spells.spread_of(d) if d.get("core_speed") else 0.0})

    @property
    def core_spread(self) -> float:
        """Fastest over slowest core speed seen while calibrating (NaN: not checked)."""
        return self.core_speed[1] / self.core_speed[0] if self.core_speed else math.nan


_cpu_model, _quota = host.cpu_model, host.quota  # re-exported (moved to harness.chip.host)


def calibrate(mode: str = "full", device_count: int | None = None,
              progress: Callable[[int, int, str], None] | None = None,
              strict: bool = False) -> Calibration:
    """Measure this host on its first ``device_count`` CPU devices (default: all of them).
    ``progress(done, total, label)`` is called before each program and once at the end.

    The drift reference kernel runs before and after: its best rate is kept (runs divide their
    own by it), and its spread (best / median) says whether the host was busy meanwhile. The
    cores' speed is checked beside the matmul probes; those measured in a slower spell run
    again (``harness.chip.spells``), each keeping its fastest, and the checks' spread is stored
    for the figures priced from it to carry. A busy host or cores that changed speed are named
    in a warning; ``strict`` raises instead."""
    import jax
    import jaxlib

    if mode not in MODES:
        raise HarnessError(f"unknown calibration mode {mode!r}; choose from {sorted(MODES)}")
    devices = jax.devices("cpu")
    n = device_count or len(devices)
    if not 1 <= n <= len(devices):
        raise HarnessError(f"cannot calibrate {n} devices: this process has {len(devices)} CPU "
                           f"devices (set --devices, or XLA_FLAGS before jax is imported)")
    sizes, t0 = MODES[mode], time.perf_counter()
    todo = tasks(sizes, n)
    reference = drift.reference_rates(devices[:n])
    speed = spells.Spells(lambda: drift.core_speed(devices[:n]))
    samples = _first_pass(todo, devices, sizes, speed, progress)
    if speed.checks:  # after the last matmul probe
        speed.check()
    again = spells.repeat(speed, lambda task: _probe(task, devices, sizes, set()))
    reference += drift.reference_rates(devices[:n])
    _steady(drift.spread(reference), speed, len(again), strict)
    if progress:
        progress(len(todo), len(todo), "done")
    cores = usable_cores()
    return Calibration(
        host=platform.node(), cpu_model=_cpu_model(), cores=cores, device_count=n,
        jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), mode=mode,
        seconds=round(time.perf_counter() - t0, 2), note=NOTE.format(n=n, cores=cores),
        one=rates(samples + again, "one", 1, 2), all=rates(samples + again, "all", n, n),
        samples=tuple(samples + again), reference_flops_per_s=max(reference),
        reference_spread=drift.spread(reference),
        core_speed=(min(speed.checks), max(speed.checks)) if speed.checks else (),
        spread=speed.spread if speed.checks else 0.0, repeats=len(again))


def _first_pass(todo, devices, sizes, speed: spells.Spells, progress) -> list[Sample]:
    """Every task measured once, the cores' speed checked before each fp32 matmul probe."""
    samples, seen = [], set()
    for i, task in enumerate(todo):
        kind, _, dt, size, _, k = task
        label = f"{kind} {dt} {size} on {k} device{'s' * (k > 1)}"
        if progress:
            progress(i, len(todo), label)
        log.info("calibrate: %s", label)
        if kind in MATMULS and dt == DTYPES[0]:
            speed.check()
        t = time.perf_counter()
        sample = _probe(task, devices, sizes, seen)
        if sample is not None:
            samples.append(sample)
            if kind in MATMULS:
                speed.add(task, sample, time.perf_counter() - t)
    return samples


def _probe(task, devices, sizes, seen: set) -> Sample | None:
    """One task's sample; None for a matmul whose kernel and size ``seen`` holds already
    (``measure_kernel``), or an overhead program the trace left out."""
    kind, scope, dt, size, role, k = task
    try:
        if kind in MATMULS:
            return measure_kernel(kind, scope, dt, size, devices[:k], sizes, seen)
        return measure(kind, scope, dt, size, role, devices[:k], sizes)
    except TraceError:
        if role != "overhead":
            raise
        # a program this small may run inline, untraced: no overhead to measure
        log.info("calibrate: %s %s left no op in the trace; no per-op overhead", kind, size)
        return None


def _steady(busy: float, speed: spells.Spells, again: int, strict: bool) -> None:
    """A warning naming a busy host (the reference's best / median above
    ``drift.BUSY_SPREAD``) or cores that changed speed (checks apart by more than
    ``drift.CORE_SPREAD``), with the spread the figures carry; ``strict``: an error."""
    if busy > drift.BUSY_SPREAD:
        _unsteady(f"the host was busy while calibrating: a reference matmul's rate varied "
                  f"{busy:.2f}x (best / median; steady hosts stay under {drift.BUSY_SPREAD}x), "
                  f"so its figures may be low", strict)
    if speed.checks and speed.spread > drift.CORE_SPREAD:
        lo, hi = min(speed.checks) / 1e9, max(speed.checks) / 1e9
        _unsteady(f"the host's cores changed speed while calibrating: the reference matmul "
                  f"ran at {lo:.0f} to {hi:.0f} GFLOP per CPU second ({speed.spread:.2f}x; "
                  f"steady cores stay under {drift.CORE_SPREAD}x); {again} probe run(s) "
                  f"repeated for the faster spell, and the figures priced from this "
                  f"calibration carry its {speed.spread:.2f}x spread", strict)


def _unsteady(msg: str, strict: bool) -> None:
    """A host too unsteady for one speed to describe it: a warning, or an error where
    ``strict``."""
    if strict:
        raise HarnessError(f"{msg}; calibrate on a quiet host (or leave out --strict)")
    log.warning("%s", msg)


# --- the chip and the cache --------------------------------------------------------------------
def save(cal: Calibration, path: str | os.PathLike | None = None) -> Path:
    """Write atomically (a crash never leaves half a file); returns the path."""
    p = Path(path) if path else cache_path(cal.device_count)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(cal.to_dict(), indent=1) + "\n")
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise HarnessError(f"{p}: cannot save the calibration ({e.strerror or e})") from None
    return p


def load(path: str | os.PathLike) -> Calibration:
    """A saved calibration; HarnessError naming the file when it cannot be used."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"format {got!r}, expected {FORMAT}")
        return Calibration.from_dict(d)
    except (OSError, ValueError, TypeError, KeyError) as e:  # JSONDecodeError is a ValueError
        raise HarnessError(f"{p}: not a usable calibration ({' '.join(str(e).split())}); "
                           f"run `harness calibrate` to replace it") from None


def cached(device_count: int) -> Calibration | None:
    """This host's saved calibration for ``device_count`` devices, or None. A corrupt file, or
    another host's, is not used: a warning names it and the next save replaces it."""
    p = cache_path(device_count)
    if not p.exists():
        return None
    try:
        cal = load(p)
    except HarnessError as e:
        log.warning("ignoring calibration: %s", e)
        return None
    if (cal.host, cal.cpu_model, cal.cores, cal.device_count) != (
            platform.node(), _cpu_model(), usable_cores(), device_count):
        log.warning("ignoring calibration %s: made on %s (%s, %d usable cores) for %d devices",
                    p, cal.host, cal.cpu_model, cal.cores, cal.device_count)
        return None
    return cal


def cpu_chip_for_run(device_count: int, quick: bool = True) -> tuple[Chip, Calibration, bool]:
    """This host's ``cpu`` chip as a value: from the saved calibration, or from a new one (quick
    by default) measured now and saved. The registry (``predictions.hardware.CHIPS``) is left
    as it is. Returns (chip, calibration, whether it was measured now)."""
    cal, measured = cached(device_count), False
    if cal is None:
        cal, measured = calibrate("quick" if quick else "full", device_count), True
        path = save(cal)
        log.warning("no calibration for this host; ran a %s one (%.1f s, saved to %s) — run "
                    "`harness calibrate` for a full one", cal.mode, cal.seconds, path)
    return to_chip(cal), cal, measured
