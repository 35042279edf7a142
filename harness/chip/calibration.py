"""The ``cpu`` chip, measured: this host's achievable peaks with XLA itself.

No data sheet describes N virtual XLA devices sharing a few host cores, so the ``cpu`` entry of
``predictions.hardware`` is measured: matmul FLOP/s per dtype, streaming memory bandwidth, and
collective bandwidth and per-hop latency (the ring model of ``predictions.collectives``), each for
one device alone (collectives: a pair) and for all N devices busy at once; plus two figures the
book's chips do without: the rate of bf16 <-> f32 converts (done in software by most CPUs) and
the fixed cost of one op execution (a tiny in-place op's time: the runtime's dispatch). Matmuls
are measured per kernel XLA:CPU compiles them to (read from each probe's HLO) and size, memory
by working set (``harness.chip.figures``).

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

from harness.chip import drift
from harness.chip.cache import CACHE_ENV, cache_path, cache_root  # noqa: F401 (re-exported)
from harness.chip.figures import Figures, figures, kernel_key  # noqa: F401 (re-exported)
from harness.chip.kernel_probes import measure_kernel
from harness.chip.probes import (  # noqa: F401 (RING re-exported)
    DTYPES,
    MATMULS,
    PLANS,
    RING,
    Sample,
    measure,
    tasks,
)
from harness.errors import HarnessError, TraceError
from predictions import hardware
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
_PLACEHOLDER = hardware.CHIPS["cpu"]  # as shipped, before a calibration replaces it


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
    mode: str  # a PLANS key
    seconds: float
    note: str
    one: Figures
    all: Figures
    samples: tuple[Sample, ...] = ()
    format: int = FORMAT
    # harness.chip.drift's reference kernel, best rate around the calibration (0: not
    # measured, an older record) and best / median over its repeats (the host's steadiness)
    reference_flops_per_s: float = 0.0
    reference_spread: float = 0.0
    # the cores' speed (``drift.core_speed``) checked before, between and after the matmul
    # probes: [slowest, fastest] FLOPs per CPU second ([]: not checked, an older record)
    core_speed: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        return cls(**{**d, "one": Figures(**d["one"]), "all": Figures(**d["all"]),
                      "samples": tuple(Sample(**s) for s in d.get("samples", ())),
                      "core_speed": tuple(d.get("core_speed", ()))})

    @property
    def core_spread(self) -> float:
        """Fastest over slowest core speed seen while calibrating (NaN: not checked)."""
        return self.core_speed[1] / self.core_speed[0] if self.core_speed else math.nan


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _quota(path: str, period_path: str | None) -> float | None:
    """A cgroup CPU quota in cores (v2 ``cpu.max``: "quota period"; v1: two files), None
    when unlimited or unreadable."""
    try:
        words = Path(path).read_text().split()
        if period_path:
            words += Path(period_path).read_text().split()
        quota, period = words[0], int(words[1])
        return None if quota in ("max", "-1") or period <= 0 else int(quota) / period
    except (OSError, ValueError, IndexError):
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota
    (cgroup v2 or v1), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = (_quota("/sys/fs/cgroup/cpu.max", None) or
             _quota("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    if quota:
        cores = min(cores or 1, math.ceil(quota))
    return int(cores or 1)


def calibrate(mode: str = "full", device_count: int | None = None,
              progress: Callable[[int, int, str], None] | None = None,
              refuse_busy: bool = False) -> Calibration:
    """Measure this host on its first ``device_count`` CPU devices (default: all of them).
    ``progress(done, total, label)`` is called before each program and once at the end.

    The drift reference kernel runs before and after: its best rate is kept (runs divide their
    own by it), and its spread (best / median) says whether the host was busy meanwhile; above
    ``drift.BUSY_SPREAD`` ``refuse_busy`` raises instead of returning figures that describe
    other people's load, not the host."""
    import jax
    import jaxlib

    if mode not in PLANS:
        raise HarnessError(f"unknown calibration mode {mode!r}; choose from {sorted(PLANS)}")
    devices = jax.devices("cpu")
    n = device_count or len(devices)
    if not 1 <= n <= len(devices):
        raise HarnessError(f"cannot calibrate {n} devices: this process has {len(devices)} CPU "
                           f"devices (set --devices, or XLA_FLAGS before jax is imported)")
    plan, t0 = PLANS[mode], time.perf_counter()
    todo, samples, seen = tasks(plan, n), [], set()
    reference, speeds = drift.reference_rates(devices[:n]), []
    for i, (kind, scope, dt, size, role, k) in enumerate(todo):
        label = f"{kind} {dt} {size} on {k} device{'s' * (k > 1)}"
        if progress:
            progress(i, len(todo), label)
        log.info("calibrate: %s", label)
        if kind in MATMULS and dt == DTYPES[0]:  # the cores' speed beside each fp32 matmul
            speeds.append(drift.core_speed(devices[:n]))
        try:
            if kind in MATMULS:
                sample = measure_kernel(kind, scope, dt, size, devices[:k], plan, seen)
                samples += [sample] if sample else []
            else:
                samples.append(measure(kind, scope, dt, size, role, devices[:k], plan))
        except TraceError:
            if role != "overhead":
                raise
            # a program this small may run inline, untraced: no overhead to measure
            log.info("calibrate: %s left no op in the trace; no per-op overhead", label)
    reference += drift.reference_rates(devices[:n])
    speeds += [drift.core_speed(devices[:n])] if speeds else []
    busy = drift.spread(reference)
    if busy > drift.BUSY_SPREAD:
        _unsteady(f"the host was busy while calibrating: a reference matmul's rate varied "
                  f"{busy:.2f}x (best / median; steady hosts stay under {drift.BUSY_SPREAD}x)",
                  refuse_busy)
    if speeds and max(speeds) / min(speeds) > drift.CORE_SPREAD:
        _unsteady(f"the host's cores changed speed while calibrating: the reference matmul "
                  f"ran at {min(speeds) / 1e9:.0f} to {max(speeds) / 1e9:.0f} GFLOP per CPU "
                  f"second ({max(speeds) / min(speeds):.2f}x; steady cores stay under "
                  f"{drift.CORE_SPREAD}x), so the matmul rates mix two speeds", refuse_busy)
    if progress:
        progress(len(todo), len(todo), "done")
    cores = usable_cores()
    return Calibration(
        host=platform.node(), cpu_model=_cpu_model(), cores=cores, device_count=n,
        jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), mode=mode,
        seconds=round(time.perf_counter() - t0, 2), note=NOTE.format(n=n, cores=cores),
        one=figures(samples, "one", 1, 2), all=figures(samples, "all", n, n),
        samples=tuple(samples), reference_flops_per_s=max(reference), reference_spread=busy,
        core_speed=(min(speeds), max(speeds)) if speeds else ())


def _unsteady(msg: str, refuse: bool) -> None:
    """A host too unsteady for its figures to describe it: an error where ``refuse``, else a
    warning."""
    if refuse:
        raise HarnessError(f"{msg}; calibrate on a quiet host (or pass --allow-busy)")
    log.warning("%s: its figures may be off", msg)


# --- the chip and the cache --------------------------------------------------------------------
def to_chip(cal: Calibration) -> Chip:
    """The ``cpu`` chip from the all-devices-busy figures (``harness run`` runs all N at once).

    Collectives: the faster of all-reduce and all-gather (bandwidth max, latency min), so the
    prediction stays a lower bound on time; with one device none runs and the placeholder's ring
    figures stay. Memory capacity: the host's RAM shared N ways.
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
        kernel_flops=kernel_flops)


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
