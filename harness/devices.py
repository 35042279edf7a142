"""The XLA flag that gives the CPU backend ``n`` virtual devices, set in one place.

XLA reads it when jax creates its CPU client, so it must be in ``XLA_FLAGS`` before jax is
imported. Standard library only: importing this module never imports jax.
"""
from __future__ import annotations

import glob
import logging
import os
import sys

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def with_device_count(flags: str, n: int) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with the device count set to ``n``."""
    kept = [f for f in flags.split() if not f.startswith(DEVICE_COUNT_FLAG)]
    return " ".join(kept + [f"{DEVICE_COUNT_FLAG}={n}"])


# jax's own setting of the CPU device count (jax_num_cpu_devices), read when jax is imported: it
# wins over the XLA flag, including one a script sets in XLA_FLAGS before it imports jax.
DEVICE_COUNT_ENV = "JAX_NUM_CPU_DEVICES"


def forced_device_count(env: dict[str, str], n: int) -> dict[str, str]:
    """``env`` (a process's environment) with ``n`` CPU devices whatever the process sets in its
    own ``XLA_FLAGS`` (``harness --devices N profile SCRIPT``)."""
    return dict(env, XLA_FLAGS=with_device_count(env.get("XLA_FLAGS", ""), n),
                **{DEVICE_COUNT_ENV: str(n)})


def device_count_flag(flags: str) -> int | None:
    """The CPU device count an ``XLA_FLAGS`` value asks for (None: it asks for none)."""
    for flag in flags.split():
        name, _, value = flag.partition("=")
        if name == DEVICE_COUNT_FLAG and value.isdigit():
            return int(value)
    return None


def set_host_device_count(n: int, *, keep_existing: bool = False) -> None:
    """Ask XLA's CPU backend for ``n`` virtual devices. Must run before jax is imported.

    ``keep_existing``: leave a device count already in ``XLA_FLAGS`` alone (``n`` is a default,
    as in the test sessions).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if keep_existing and DEVICE_COUNT_FLAG in flags:
        return
    if "jax" in sys.modules:
        logging.getLogger(__name__).warning("jax already imported; --devices %d has no effect", n)
    os.environ["XLA_FLAGS"] = with_device_count(flags, n)


# An installed libtpu (the tpu extra: compiling for TPU slices ahead of time) probes for TPU
# chips whenever jax starts and, on a host with none, prints warnings about its environment.
# These settings say what it would find: one host, no chips to look up.
NO_TPU_ENV = {"TPU_SKIP_MDS_QUERY": "1", "TPU_WORKER_HOSTNAMES": "localhost",
              "TPU_HOST_BOUNDS": "1,1,1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1"}
# Device nodes of the accelerators jax has backends for: TPU (accel, vfio), NVIDIA GPU, AMD GPU.
TPU_NODES = ("/dev/accel*", "/dev/vfio")
GPU_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd")
# On a host with none of them jax can only run on its CPU. Saying so up front keeps an installed
# libtpu from starting at all: started, it attaches its own profiler to every trace, which made
# a traced llama_train tiny step 1.66x a plain one against 1.17x without it (lean profiler
# options; 1.44x against 0.98x with host events off). Compiling for TPU slices (libtpu's
# topologies) does not need it.
PLATFORMS_ENV = "JAX_PLATFORMS"


def _present(patterns) -> bool:
    return any(glob.glob(p) for p in patterns)


def quiet_absent_libtpu() -> None:
    """On a host with no TPU device node, give libtpu ``NO_TPU_ENV`` (settings already made are
    kept). libtpu reads them when jax starts its backends, so this works after ``import jax``
    too; the JAX platform is left as the user chose it. ``import harness`` does this."""
    if _present(TPU_NODES):
        return
    for key, value in NO_TPU_ENV.items():
        os.environ.setdefault(key, value)


def quiet_absent_tpu() -> None:
    """``quiet_absent_libtpu``; on a host with no accelerator node at all, also
    ``JAX_PLATFORMS=cpu``. Settings already made are kept. Must run before jax is imported; a
    host with TPUs is left alone. The ``harness`` command and the pytest plugin do this."""
    quiet_absent_libtpu()
    if not _present(TPU_NODES) and not _present(GPU_NODES):
        os.environ.setdefault(PLATFORMS_ENV, "cpu")
