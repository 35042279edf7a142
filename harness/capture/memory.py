"""Will a compiled program fit in device memory? Checked after compile, before anything runs.

``compiled.memory_analysis()`` gives XLA's per-device buffer sizes; a program needs its
arguments and outputs (less the outputs aliased onto donated arguments), its temporaries and its
code. A device's capacity is ``device.memory_stats()["bytes_limit"]`` (GPU, TPU); XLA's CPU
devices report none, and virtual CPU devices share the host's RAM, so each gets RAM / devices.
``$SCALING_HARNESS_DEVICE_MEMORY`` (bytes, or ``16GiB``) overrides the capacity.

An out-of-memory error from XLA itself (``RESOURCE_EXHAUSTED`` while compiling or running)
becomes the same one-line ``OutOfMemory``.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence

from harness import schema, units
from harness.errors import HarnessError, one_line
from predictions import hardware

MEMORY_ENV = "SCALING_HARNESS_DEVICE_MEMORY"
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")
DEFAULT_KNOBS = "a mesh over more devices, a smaller batch B or sequence S, remat"


class OutOfMemory(HarnessError):
    """A program that does not fit in device memory."""


def parse_bytes(text: str) -> int:
    """``"16GiB"`` -> 17179869184; ``"1000"`` -> 1000 (``units.parse_bytes``, in whole bytes)."""
    try:
        return int(units.parse_bytes(text))
    except units.UnitError:
        raise HarnessError(f"{MEMORY_ENV}={text!r} is not a size like 16GiB or 17179869184; "
                           f"units: {units.BYTE_UNIT_NAMES}") from None


def footprint(memory: Mapping[str, float]) -> float:
    """Per-device bytes a program holds at once, at most: arguments + outputs - aliased +
    temporaries + code (``memory`` keyed as ``workloads.aot.memory_stats`` gives them)."""
    return sum(memory.get(k, 0) for k in ("arguments", "outputs", "temporaries", "code")) \
        - memory.get("aliased", 0)


def _is_host_peak(memory: Mapping[str, float]) -> bool:
    """Whether libtpu's peak is the host memory's (``memory_fit``), to within 1 MB."""
    host = memory.get("host_temporaries")
    figure = (host or 0) + memory.get("arguments", 0) + memory.get("outputs", 0) \
        - memory.get("aliased", 0)
    return bool(host) and abs(memory.get("peak", 0) - figure) <= 1e6


def memory_fit(memory: dict, chip, placed: bool = False) -> dict:
    """``compiled.memory_analysis()`` per device against the chip's HBM. ``peak_bytes``: the
    compiler's own peak where it reports one (buffers whose lifetimes do not overlap share
    memory), else arguments + outputs - aliased + temporaries + code, an upper bound;
    ``headroom_bytes`` < 0 means it does not fit. With activations offloaded
    (``host_temporaries``) libtpu's peak is the larger of the HBM's and the host memory's, and
    the host's reads host temporaries + arguments + outputs - aliased, to 34 kB (LLaMA-3.1
    70B on v6e-256: 126.3 GB = 120.8 GB of offloaded activations + the state twice, where the
    HBM holds at most 32.1 GB; donated, 123.6 GB = 120.8 + the state once); a peak that is the
    host's says nothing of the HBM, so the sum is judged instead. LLaMA-3.1 405B on v5p-1024
    with its state donated: peak 93.8 GB, not the host's 68.7 + 8.0 GB, so the HBM's.

    ``placed``: the TPU compiler returned the program, so it placed every buffer in the HBM
    it counts as usable, which is what decides: libtpu counts in GiB (31.25 GiB = 33.55 GB
    usable on a v6e, against the book's 32 GB), so a program it placed fits even where the
    figure above is past the book's HBM (``placed_past_book``)."""
    hbm = hardware.chip_entry(chip).hbm_bytes
    total = footprint(memory)
    host_peak = _is_host_peak(memory)
    peak = (None if host_peak else memory.get("peak")) or total
    return {**memory, "sum_bytes": total, "peak_bytes": peak, "hbm_bytes": hbm,
            "headroom_bytes": hbm - peak, "fits": peak <= hbm or placed,
            "placed_past_book": placed and peak > hbm, "host_peak": host_peak}


def needed_bytes(compiled) -> int | None:
    """Per-device bytes the program needs (XLA's ``memory_analysis()``), None if unknown."""
    from workloads.aot import memory_stats  # deferred: workloads imports jax

    stats = memory_stats(compiled)
    return int(footprint(stats)) if stats else None


def _host_ram() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def capacity_bytes(device, local_devices: int = 1, host_share: bool = True) -> int | None:
    """What ``device`` can hold: the override, its ``bytes_limit``, or (``host_share``) a
    CPU device's share of host RAM."""
    if os.environ.get(MEMORY_ENV):
        return parse_bytes(os.environ[MEMORY_ENV])
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - not implemented on every backend
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if host_share and getattr(device, "platform", "") == "cpu":
        ram = _host_ram()
        return ram // max(1, local_devices) if ram else None
    return None


def check_fits(compiled, devices: Sequence | None = None,
               knobs: str = DEFAULT_KNOBS) -> tuple[int | None, int | None]:
    """Raise ``OutOfMemory`` if ``compiled`` needs more per device than the smallest of
    ``devices`` (default: this process's) holds; returns (needed, capacity), either None when
    unknown. Callers (``harness run``, a workload's presets) call it before running."""
    import jax

    devices = list(devices) if devices is not None else jax.local_devices()
    need = needed_bytes(compiled)
    caps = [c for c in (capacity_bytes(d, len(devices)) for d in devices) if c]
    have = min(caps) if caps else None
    if need is not None and have is not None and need > have:
        kind = devices[0].device_kind if devices else "device"
        err = OutOfMemory(f"the program needs {units.fmt_bytes(need)} per device but a {kind} "
                          f"has {units.fmt_bytes(have)}; what helps: {knobs}")
        err.need, err.capacity = need, have  # for the answer (harness.memory.oom)
        raise err
    return need, have


def host_note(meta: Mapping) -> str:
    """One line for a CPU run's report: what the process's devices need of the host's RAM
    together (virtual devices share it); empty when XLA gave no figure or they are not CPUs."""
    need, have = meta.get(schema.MEMORY_NEEDED_BYTES), meta.get(schema.MEMORY_CAPACITY_BYTES)
    n = int(meta.get(schema.DEVICE_COUNT) or 1) // max(1, int(meta.get("process_count") or 1))
    if not need or meta.get("platform") != "cpu":
        return ""
    each = f" (a device's share: {units.fmt_bytes(have)})" if have else ""
    return (f"memory: the program needs {units.fmt_bytes(need)} per device{each}, XLA's "
            f"memory_analysis; its {n} device(s) share the host's RAM: "
            f"{units.fmt_bytes(need * n)} together")


def is_oom(exc: BaseException) -> bool:
    """An XLA out-of-memory error (``RESOURCE_EXHAUSTED`` from compile or run)."""
    import jax

    return (isinstance(exc, jax.errors.JaxRuntimeError)
            and any(m in str(exc) for m in OOM_MARKERS))


@contextlib.contextmanager
def oom_as_error(what: str, knobs: str = DEFAULT_KNOBS) -> Iterator[None]:
    """Turn an out-of-memory inside the block into one line: ``what`` ran out of memory."""
    try:
        yield
    except OutOfMemory as e:
        raise OutOfMemory(f"{what}: {str(e).split('; what helps:')[0]}; what helps: {knobs}"
                          ) from None
    except Exception as e:
        if not is_oom(e):
            raise
        raise OutOfMemory(f"{what} ran out of device memory ({one_line(e)[:160]}); what helps: "
                          f"{knobs}") from None
