"""On-disk cache of ahead-of-time compiles (``workloads.aot``): a real-size TPU compile takes
minutes, its result (HLO text, cost and memory analyses, timings) a few MB of gzip.

The key covers everything the HLO depends on: workload, preset, overrides, mesh, the TPU chip
(or the CPU compile), the jax, jaxlib and libtpu versions, and the source of the ``workloads``
package itself, so an edited model never reads a stale entry.

    cached = load(directory, key)        # AotResult (``cached=True``) or None
    save(directory, key, result)
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)
FORMAT = 1
_SOURCE = Path(__file__).resolve().parent
CPU_COMPILER = "XLA:CPU"


@dataclass(frozen=True)
class AotResult:
    """One ahead-of-time compile, as ``workloads.aot`` makes it and this cache stores it
    (times in seconds, ``memory`` in bytes per device)."""

    hlo_text: str
    lower_s: float
    compile_s: float
    devices: int
    cost_analysis: dict
    compiler: str = CPU_COMPILER  # "XLA:CPU" or "XLA:TPU (libtpu <version>)"
    topology: str | None = None   # the TPU slice compiled for, e.g. "v5p:4x4x4"
    memory: dict = field(default_factory=dict)  # workloads.aot.MEMORY_FIELDS values, bytes
    cached: bool = False          # read from this cache, not compiled now


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(_SOURCE.rglob("*.py")):
        h.update(path.relative_to(_SOURCE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def key(name: str, preset: str, overrides: Mapping[str, str] | None, mesh_shape: str,
        tpu_chip: str | None) -> str:
    """A hex digest naming one compile."""
    from importlib import metadata

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    payload = {"format": FORMAT, "workload": name, "preset": preset,
               "overrides": dict(sorted((overrides or {}).items())), "mesh": mesh_shape,
               "tpu_chip": tpu_chip, "jax": version("jax"), "jaxlib": version("jaxlib"),
               "libtpu": version("libtpu") if tpu_chip else None, "source": _source_digest()}
    flags = os.environ.get("LIBTPU_INIT_ARGS") if tpu_chip else None
    if flags:   # libtpu's flags change the program (MaxText's recipes set some); unset: as before
        payload["libtpu_flags"] = flags
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def _path(directory: Path, digest: str) -> Path:
    return Path(directory) / f"aot-{digest}.json.gz"


def load(directory: Path, digest: str) -> AotResult | None:
    """The cached ``AotResult`` (with ``cached=True``), or None when absent or unreadable."""
    path = _path(directory, digest)
    if not path.exists():
        return None
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
        return AotResult(**{**data, "cached": True})
    except (OSError, ValueError, TypeError, EOFError) as e:
        log.warning("ignoring unreadable AOT cache entry %s: %s", path, e)
        return None


def save(directory: Path, digest: str, result: AotResult) -> Path:
    """Write atomically (a crash never leaves half an entry); returns the path."""
    path = _path(directory, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = {k: v for k, v in dataclasses.asdict(result).items() if k != "cached"}
    tmp.write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))
    os.replace(tmp, path)
    return path
