"""What ran where: the backend, devices and versions of the running process, the compiled
program's fingerprint, and the commit of the code that ran; stored in every run's ``meta``.

Standard library only at import (jax is imported inside ``environment``).
"""
from __future__ import annotations

import hashlib
import inspect
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from importlib import metadata as _md
from pathlib import Path

import harness
from harness import schema


def _version(dist: str) -> str:
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return ""


def environment(devices: Sequence | None = None) -> dict:
    """Backend, devices and versions of the running process (jax imported here)."""
    import jax

    devices = list(devices) if devices is not None else jax.devices()
    return {
        "backend": jax.default_backend(),
        schema.DEVICE_KIND: devices[0].device_kind if devices else "",
        "platform": devices[0].platform if devices else "",
        schema.DEVICE_COUNT: len(devices),
        # the CPU device count the process asked jax for (-1: none; jax_num_cpu_devices)
        "jax_num_cpu_devices": getattr(jax.config, "jax_num_cpu_devices", -1),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "jax_version": jax.__version__,
        "jaxlib_version": _version("jaxlib"),
        "libtpu_version": _version("libtpu"),
        "xprof_version": _version("xprof"),
        schema.XLA_FLAGS: os.environ.get("XLA_FLAGS", ""),
        schema.HARNESS_VERSION: harness.__version__,
        "host": platform.node(),
        "python": platform.python_version(),
    }


# An HLO line's metadata (source lines, op names) and the module's header tables (file names,
# stack frames): they move with any edit of the Python around the program, not with the program.
_METADATA = re.compile(r",? metadata=\{[^{}]*\}")
_PROGRAM_LINE = ("HloModule", "%", "ENTRY", " ", "}")


def fingerprint(hlo_text: str) -> str:
    """A short hash of an optimized HLO module's computations, its metadata left out: two runs
    with the same fingerprint ran the same compiled program."""
    lines = [_METADATA.sub("", line) for line in hlo_text.splitlines()
             if line.startswith(_PROGRAM_LINE)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# the folder holding the harness's packages (a checkout, or site-packages where installed)
HARNESS_ROOT = Path(harness.__file__).resolve().parent.parent


def source_dir(fn) -> Path | None:
    """The directory of the file that defines ``fn`` (through ``jax.jit``'s and ``nnx.jit``'s
    wrappers); None where Python cannot say (a builtin, a lambda typed at a prompt)."""
    try:
        found = inspect.getsourcefile(inspect.unwrap(fn))
    except (TypeError, ValueError):
        return None
    return Path(found).resolve().parent if found and Path(found).exists() else None


def git_state(where: str | os.PathLike | None = None) -> dict:
    """The commit of the code that ran and whether its checkout had uncommitted changes to
    tracked files: the checkout holding the directory ``where`` ({} outside any); without it,
    the working directory's checkout (a CI job runs from its repository), else the harness's
    own; {} outside any."""
    places = [Path(where)] if where is not None else [Path.cwd(), Path(__file__).resolve().parent]
    for cwd in places:
        sha = _git("rev-parse", "--short=12", "HEAD", cwd=cwd)
        if sha:
            dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=cwd)
            return {schema.GIT_SHA: sha, schema.GIT_DIRTY: None if dirty is None else bool(dirty)}
    return {}
