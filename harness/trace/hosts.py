"""Several hosts' traces of one profile, read as one job's: each decoded on its own (in worker
processes where cores allow, ``harness.trace.parallel``), merged as process 0 merges a job's
EVENTS (``merged_events``).

``jax.profiler`` on a multi-host job writes one ``<host>.xplane.pb`` per host into the session's
folder (``plugins/profile/<session>/``) when the log directory is shared, or each host writes its
own and they are copied together; ``host_traces`` finds them, ``read_hosts`` reads them,
``read_job`` reads them as one job's trace beside one host's already decoded.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from harness import schema
from harness.trace.host_events import host_events
from harness.trace.load import (
    TRACE_SUFFIX,
    TraceEvents,
    find_trace_file,
    read_events,
    read_xspace,
)
from harness.trace.parallel import in_parallel

MERGED = "merged"  # the format name of every process's EVENTS together (no single host's)


def merged_events(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Each process's EVENTS (``parts[i]``: process i's) as one table with a ``schema.HOST``
    column; programs and ops categorical over every process's names."""
    merged = pd.concat([d.assign(**{schema.HOST: i}).astype({schema.PROGRAM: str, schema.OP: str})
                        for i, d in enumerate(parts)], ignore_index=True)
    return merged.astype({schema.PROGRAM: "category", schema.OP: "category"})


def host_traces(path: str | os.PathLike) -> list[Path]:
    """The traces of one profiling session: the ``*.xplane.pb`` files beside the newest one
    under ``path`` (a file: itself alone), sorted by name (host 0 first as named)."""
    p = Path(path)
    newest = find_trace_file(p)
    if p.is_file():
        return [newest]
    return sorted(newest.parent.glob(f"*{TRACE_SUFFIX}"))


def _read(warmup_steps: int, path: Path) -> pd.DataFrame:
    return read_events(path, warmup_steps=warmup_steps).events


def read_hosts(paths: list[Path], warmup_steps: int = 0,
               known: dict[Path, pd.DataFrame] | None = None
               ) -> tuple[pd.DataFrame, list[dict]]:
    """Every host's EVENTS as one table with a ``schema.HOST`` column (the host's index in
    ``paths``), and one record per host (``process``; ``host``: the file's name without its
    suffix; its ``devices``). ``known``: EVENTS already read, by path. Each host numbers its own
    steps, as each process of a job does; where the hosts number their devices alike (GPU and
    TPU planes are numbered per host), host i's devices are moved past the others', as a job's
    global device ids are."""
    known = known or {}
    rest = [p for p in paths if p not in known]
    read = dict(zip(rest, in_parallel(_read, warmup_steps, rest,
                                      sum(p.stat().st_size for p in rest))))
    parts = [known[p] if p in known else read[p] for p in paths]
    devices = [set(d[schema.DEVICE].unique().tolist()) for d in parts]
    if sum(map(len, devices)) > len(set().union(*devices)):  # each host numbers its own
        span = max(max(d, default=0) for d in devices) + 1
        parts = [d.assign(**{schema.DEVICE: d[schema.DEVICE] + i * span})
                 for i, d in enumerate(parts)]
    processes = [{"process": i, "host": p.name.removesuffix(TRACE_SUFFIX),
                  "devices": sorted(d[schema.DEVICE].unique().tolist())}
                 for i, (p, d) in enumerate(zip(paths, parts))]
    return merged_events(parts), processes


def read_job(paths: list[Path], path: Path, events: TraceEvents, warmup_steps: int = 0
             ) -> tuple[TraceEvents, list[dict]]:
    """One profile's traces of several hosts (``paths``) as one job's EVENTS (``read_hosts``),
    the host at ``path`` already decoded (``events``), and one record per host."""
    merged, processes = read_hosts(paths, warmup_steps, {path: events.events})
    # each host numbers its own compilations: programs are named by name alone
    merged = merged.assign(**{schema.PROGRAM_ID: ""})
    return TraceEvents(merged, MERGED, f"{path.parent} ({len(paths)} hosts)",
                       host=job_host_events(paths, {path: events.host}, processes)), processes


def job_host_events(paths: list[Path], known: dict, processes: list[dict]) -> pd.DataFrame:
    """Every host's HOST_EVENTS (``harness.trace.host_events``) as one table, each host's
    ``schema.HOST`` its index in ``paths`` and a device plane's n its n-th device of the job's
    (``processes``, as ``read_hosts`` numbers them); ``known``: tables already read, by path
    (None: read it)."""
    parts = []
    for i, p in enumerate(paths):
        part = known.get(p)
        part = host_events(read_xspace(p)[0]) if part is None else part
        ids = dict(enumerate(processes[i]["devices"]))
        dev = part[schema.DEVICE].map(lambda d, ids=ids: ids.get(d, d) if d >= 0 else d)
        parts.append(part.assign(**{schema.HOST: i, schema.DEVICE: dev}))
    return pd.concat(parts, ignore_index=True) if parts else None
