"""The host a calibration describes: its CPU model and the cores this process may run on. A
saved calibration is used only on the host, CPU model, usable core count and device count it
was made for (``harness.chip.calibration.cached``)."""
from __future__ import annotations

import math
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def quota(path: str, period_path: str | None) -> float | None:
    """A cgroup CPU quota in cores (v2 ``cpu.max``: "quota period"; v1: two files), None
    when unlimited or unreadable."""
    try:
        words = Path(path).read_text().split()
        if period_path:
            words += Path(period_path).read_text().split()
        share, period = words[0], int(words[1])
        return None if share in ("max", "-1") or period <= 0 else int(share) / period
    except (OSError, ValueError, IndexError):
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota
    (cgroup v2 or v1), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    limit = (quota("/sys/fs/cgroup/cpu.max", None) or
             quota("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    if limit:
        cores = min(cores or 1, math.ceil(limit))
    return int(cores or 1)
