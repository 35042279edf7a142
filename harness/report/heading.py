"""What a report page says first: what ran (the title), where, when and from which commit (the
meta lines), from a run's ``meta`` (``harness.record.Run``). A workload's run is titled by its
workload, preset, the settings it ran with and its mesh; a trace's by its program and device
(its stored title)."""
from __future__ import annotations

from collections.abc import Mapping

from harness import schema
from harness.record import Run
from predictions.mesh import mesh_label


def mesh_str(mesh) -> str:
    """{'X': 4, 'Y': 2} -> "4x2", {'fsdp': 4, 'model': 2} -> "fsdp=4,model=2"
    (``predictions.mesh.mesh_label``); a string stays as it is."""
    if isinstance(mesh, Mapping):
        return mesh_label(mesh) or "1"
    return str(mesh or "")


def settings(values: Mapping | None) -> str:
    """{'kind': 'all_gather', 'nbytes': 4096} -> "kind=all_gather nbytes=4096"."""
    return " ".join(f"{k}={v}" for k, v in (values or {}).items())


def when(iso: str) -> str:
    """"2026-11-25T08:37:07+00:00" -> "2026-11-25 08:37 +00:00"."""
    if not iso or "T" not in iso:
        return str(iso or "")
    day, clock = iso.split("T", 1)
    zone = clock[8:] if len(clock) > 8 and clock[8] in "+-Z" else ""
    return f"{day} {clock[:5]}" + (f" {zone}" if zone else "")


def title(r: Run) -> str:
    """The page's title: "matmul (tiny) case=allgather B=256 on mesh 4x2, 8x cpu (predicted for
    cpu)" for a workload's run; the run's own title otherwise."""
    m = r.meta
    if not m.get(schema.WORKLOAD):
        return r.title
    what = f"{m[schema.WORKLOAD]} ({m.get(schema.PRESET) or 'custom'})"
    if m.get(schema.OVERRIDES):
        what += f" {settings(m[schema.OVERRIDES])}"
    if m.get(schema.MESH):
        what += f" on mesh {mesh_str(m[schema.MESH])}"
    if m.get(schema.DEVICE_COUNT):
        what += f", {m[schema.DEVICE_COUNT]}x {m.get(schema.DEVICE_KIND) or '?'}"
    return what + (f" (predicted for {m[schema.CHIP]})" if m.get(schema.CHIP) else "")


def meta_lines(r: Run) -> list[str]:
    """Where and when it ran, from which commit (and whether its checkout had uncommitted
    changes) and with which harness; then the workload's whole config."""
    m = r.meta
    first = []
    if m.get(schema.TRACE_FILE):
        first.append(f"trace {m[schema.TRACE_FILE]}")
    if m.get(schema.TIME):
        first.append(f"{'traced' if m.get(schema.TRACE_FILE) else 'ran'} {when(m[schema.TIME])}")
    if m.get("jax_version"):
        first.append(f"jax {m['jax_version']}" + (f" on {m['backend']}" if m.get("backend")
                                                  else ""))
    # taken at capture (harness.capture.environment.git_state); a profiled script outside any
    # checkout has none (GIT_SHA "")
    commit = m.get(schema.GIT_SHA)
    if commit:
        first.append(f"commit {str(commit)[:10]}" + (" (dirty)" if m.get(schema.GIT_DIRTY)
                                                       else ""))
    if m.get(schema.HARNESS_VERSION):
        first.append(f"harness {m[schema.HARNESS_VERSION]}")
    if getattr(r, "name", ""):
        first.append(f"run {r.name}")
    lines = [" · ".join(first)]
    if m.get(schema.CONFIG):
        lines.append(f"config: {settings(m[schema.CONFIG])}")
    return [line for line in lines if line]


def measured_title(read, ops) -> str:
    """The title of a trace's measured per-op table, with neither HLO nor chip (``read``: its
    ``TraceEvents``, ``ops``: OPS[measured]): source, trace format, devices, steps and ops."""
    events = read.events
    return (f"{read.source}: {read.format} format, {events[schema.DEVICE].nunique()} devices, "
            f"{events[schema.STEP].nunique()} steps, {len(ops)} ops (measured only: give "
            f"--chip for predictions)")
