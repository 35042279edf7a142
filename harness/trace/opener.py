"""Opening a trace: finding the ``*.xplane.pb``, reading its planes' metadata, naming its format,
and starting its decode in worker processes (``start_decode``) before pandas and the analysis
are imported. Nothing here imports pandas (``harness.trace.load`` builds the EVENTS table).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from google.protobuf.message import DecodeError

from harness.errors import TraceError
from harness.trace import chrome
from harness.trace.formats import FORMATS
from harness.trace.space import Source, Space

log = logging.getLogger(__name__)

TRACE_SUFFIX = ".xplane.pb"


def find_trace_file(path: str | os.PathLike) -> Path:
    """The ``*.xplane.pb`` at ``path``, or the newest one below a directory; where a directory
    holds none, the newest of jax.profiler's Chrome JSON traces (``*.trace.json.gz``, read by
    ``harness.trace.chrome``): an XSpace, when there is one, wins."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if p.is_file():
        return p
    found = sorted(p.rglob(f"*{TRACE_SUFFIX}"), key=lambda f: f.stat().st_mtime)
    if not found:
        found = sorted((f for suffix in chrome.SUFFIXES for f in p.rglob(f"*{suffix}")),
                       key=lambda f: f.stat().st_mtime)
    if not found:
        raise TraceError(f"{p}: no *{TRACE_SUFFIX} trace (nor a jax.profiler "
                         f"*{chrome.SUFFIXES[0]}) below this directory")
    if len(found) > 1:
        log.info("%s: %d traces found, using the newest %s", p, len(found), found[-1])
    return found[-1]


def read_xspace(source: str | os.PathLike | bytes | Space) -> tuple[Space, str]:
    """Open an XSpace (``harness.trace.space``: its planes' metadata read, its lines left on
    disk until a format reads them); returns it with a label naming where it came from (for
    errors). A ``Space`` is returned as it is; a protobuf ``XSpace`` message is read from its
    bytes. A Chrome JSON trace is read whole as a ``chrome.ChromeTrace``, which stands where
    the XSpace stands (jax.profiler's TPU trace; any other, one line saying what it lacks)."""
    if isinstance(source, (Space, chrome.ChromeTrace)):
        return source, getattr(source, "label", "<xspace>")
    if hasattr(source, "SerializeToString"):
        source, label = source.SerializeToString(), "<xspace>"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        label = "<bytes>"
    else:
        path = find_trace_file(source)
        source, label = path, str(path)
    src = Source(path=source) if isinstance(source, Path) else Source(source)
    head = bytes(src.read(0, 64))
    if not head:
        raise TraceError(f"{label}: empty trace file")
    if chrome.looks_like_json(head):
        return chrome.read(bytes(src.read(0, src.size)), label), label
    try:
        space = Space(src)
    except DecodeError as e:
        raise TraceError(f"{label}: truncated or corrupt XSpace protobuf ({e})") from None
    if not space.planes:
        raise TraceError(f"{label}: not an XSpace trace (no planes)")
    return space, label


def detect_format(space: Space, label: str = "<trace>") -> str:
    """Name of the first registered format that recognises the trace."""
    for name, trace_format in FORMATS.items():
        try:
            found = trace_format.detect(space)
        except DecodeError as e:  # lines are decoded lazily: damage inside one shows here
            raise TraceError(f"{label}: damaged XSpace: a line's header cannot be read "
                             f"({e})") from None
        if found:
            return name
    planes = [p.name for p in space.planes]
    raise TraceError(f"{label}: no XLA op timeline found (planes {planes}); "
                     f"known formats: {list(FORMATS)}")


def start_decode(space: Space, label: str = "<trace>") -> str:
    """Start decoding ``space`` in worker processes (its format's ``start``, where cores allow),
    so that work done before ``read_events(space)`` runs beside it; the format's name."""
    name = detect_format(space, label)
    if FORMATS[name].start is not None:
        try:
            FORMATS[name].start(space)
        except DecodeError as e:
            raise TraceError(f"{label}: corrupt XSpace line ({e})") from None
    return name
