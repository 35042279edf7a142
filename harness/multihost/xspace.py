"""``trace/merged/all-processes.xplane.pb``: every process's op executions in one XSpace.

Process 0 holds every process's EVENTS (not their raw traces), so the merged file is written
from them in the CPU format that ``harness trace`` and the xprof trace viewer read
(`harness.trace.cpu`): one ``/host:CPU`` plane, one XLA thread line per process and device,
named after the process and its host (``tf_XLA p1 node-b device 5``); each op event carries
``hlo_op``, ``hlo_module``, ``device_ordinal`` (the global device id) and a ``run_id`` per
(step, program), in step order. ``XSpace.hostnames`` lists the hosts by process.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness import schema
from harness.trace.planes import HOST_PLANE, XLA_THREAD_PREFIX
from harness.trace.xplane import XSpace

MERGED_DIR = "merged"
MERGED_FILE = "all-processes.xplane.pb"
STATS = ("hlo_op", "hlo_module", "device_ordinal", "run_id")


def merged_xspace(events: pd.DataFrame, processes: list[dict]) -> XSpace:
    """The XSpace of ``events`` (every process's, with ``schema.HOST``); steps < 0 left out."""
    ev = events[events[schema.STEP] >= 0]
    hosts = {int(p["process"]): str(p.get("host", "")) for p in processes}
    space = XSpace()
    space.hostnames.extend(hosts[k] for k in sorted(hosts))
    plane = space.planes.add(id=1, name=HOST_PLANE)
    sid = {name: i for i, name in enumerate(STATS, start=1)}
    for name, i in sid.items():
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    ops = {op: i for i, op in enumerate(sorted(ev[schema.OP].astype(str).unique()), start=1)}
    for op, i in ops.items():
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, op
    programs = sorted(ev[schema.PROGRAM].astype(str).unique())
    for n, ((host, device), g) in enumerate(ev.groupby([schema.HOST, schema.DEVICE],
                                                       observed=True, sort=True), start=1):
        g = g.sort_values(schema.START_NS)
        base = int(g[schema.START_NS].min())
        line = plane.lines.add(id=n, timestamp_ns=base,
                               name=f"{XLA_THREAD_PREFIX}XLA p{host} {hosts.get(int(host), '')} "
                                    f"device {device}".replace("  ", " "))
        for op, prog, step, start, dur in zip(
                g[schema.OP].astype(str), g[schema.PROGRAM].astype(str), g[schema.STEP],
                g[schema.START_NS], g[schema.DURATION_NS]):
            e = line.events.add(metadata_id=ops[op], offset_ps=(int(start) - base) * 1000,
                                duration_ps=int(dur) * 1000)
            e.stats.add(metadata_id=sid["hlo_op"], str_value=op)
            e.stats.add(metadata_id=sid["hlo_module"], str_value=prog)
            e.stats.add(metadata_id=sid["device_ordinal"], int64_value=int(device))
            e.stats.add(metadata_id=sid["run_id"],
                        int64_value=int(step) * len(programs) + programs.index(prog) + 1)
    return space


def write_merged(run_dir: Path, events: pd.DataFrame, processes: list[dict]) -> Path:
    """Write ``<run>/trace/merged/all-processes.xplane.pb``; returns its path."""
    path = Path(run_dir) / "trace" / MERGED_DIR / MERGED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(merged_xspace(events, processes).SerializeToString())
    return path
