"""The per-event decoder ``harness.trace`` used before its column decoder (``harness.trace.wire``),
kept as the reference the new one is checked against: protobuf's own parse of the whole XSpace,
then a Python loop over every event and stat, as the formats read them (``harness.trace.cpu``,
``gpu``, ``tpu``). Slow on purpose: nothing here is clever. What does not decode (the folding
of GPU kernels into executions, CUDA-graph attribution, TPU self times, step windows) is the
formats' own code, imported.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from harness import schema
from harness.trace import gpu, graphs, tpu
from harness.trace.load import find_trace_file
from harness.trace.planes import StepWindows
from harness.trace.xplane import XSpace


class Plane:
    """One protobuf XPlane's lookups: event and stat names, stat values by name."""

    def __init__(self, plane):
        self.plane = plane
        self.event_names = {k: m.name for k, m in plane.event_metadata.items()}
        self.stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        self.stat_ids = {m.name: k for k, m in plane.stat_metadata.items()}
        self.lines = {}
        for line in plane.lines:
            self.lines.setdefault(line.name, line)

    def value(self, stat):
        kind = stat.WhichOneof("value")
        if kind == "ref_value":
            return self.stat_names.get(stat.ref_value, "")
        return getattr(stat, kind) if kind else None

    def stats(self, stats) -> dict:
        return {self.stat_names.get(s.metadata_id, ""): self.value(s) for s in stats}


def events_of(line):
    """(event, start ns, duration ns) of every event of a line."""
    base_ps = line.timestamp_ns * 1000
    for ev in line.events:
        yield ev, (base_ps + ev.offset_ps) // 1000, ev.duration_ps // 1000


def host_steps(space) -> tuple[StepWindows, dict]:
    host = next((p for p in space.planes if p.name == "/host:CPU"), None)
    if host is None:
        return StepWindows([]), {}
    idx = Plane(host)
    step_id, run_id = idx.stat_ids.get("step_num"), idx.stat_ids.get("run_id")
    execute = {k for k, n in idx.event_names.items()
               if n.startswith("CommonPjRtLoadedExecutable::Execute")}
    windows, executes = [], []
    for line in host.lines:
        if line.name.startswith("tf_"):
            continue
        for ev, start, dur in events_of(line):
            for st in ev.stats:
                if st.metadata_id == step_id:
                    windows.append((start, start + dur, int(idx.value(st))))
                elif st.metadata_id == run_id and ev.metadata_id in execute:
                    executes.append((start, int(idx.value(st))))
    steps, run_step = StepWindows(windows), {}
    for start, rid in executes:
        if run_step.get(rid, -1) < 0:
            run_step[rid] = steps.step_at(start)
    return steps, run_step


def device_steps(idx: Plane) -> StepWindows:
    line = idx.lines.get("Steps")
    if line is None:
        return StepWindows([])
    windows = []
    for i, (ev, start, dur) in enumerate(events_of(line)):
        name = idx.event_names.get(ev.metadata_id, "")
        step = idx.stats(ev.stats).get("step_num", int(name) if name.isdigit() else i)
        windows.append((start, start + dur, int(step)))
    return StepWindows(windows)


def device_planes(space, pattern: str):
    return [(int(m.group(1)), p) for p in space.planes if (m := re.match(pattern, p.name))]


def cpu_rows(space) -> tuple[list, bool]:
    """(program, program id, op, device, step, start, duration) of every op event of the host's
    lines: on XLA's thread-pool lines an event kind is an op if its first event there has an
    ``hlo_op`` stat; on the others (the caller's, where XLA:CPU ran a program inline), an event
    is an op if it has one itself."""
    host = next(p for p in space.planes if p.name == "/host:CPU")
    idx = Plane(host)
    ids = [idx.stat_ids.get(n) for n in ("hlo_op", "hlo_module", "device_ordinal", "run_id",
                                         "program_id")]
    steps, run_step = host_steps(space)
    is_op, op_names, rows, programs = {}, {}, [], {}
    for line in host.lines:
        pool = line.name.startswith("tf_")
        for ev, start, dur in events_of(line):
            by_id = {st.metadata_id: st for st in ev.stats}
            if not pool:
                if ids[0] not in by_id:
                    continue
                op_names.setdefault(ev.metadata_id, idx.value(by_id[ids[0]]))
            elif ev.metadata_id not in is_op:
                is_op[ev.metadata_id] = ids[0] in by_id
                if ids[0] in by_id:
                    op_names.setdefault(ev.metadata_id, idx.value(by_id[ids[0]]))
            if pool and not is_op[ev.metadata_id]:
                continue
            device, run = (st.int64_value or st.uint64_value if st is not None else -1
                           for st in (by_id.get(ids[2]), by_id.get(ids[3])))
            if run not in programs:
                programs[run] = tuple(str(idx.value(by_id[k])) if k in by_id else ""
                                      for k in (ids[1], ids[4]))
            flow = by_id.get(idx.stat_ids.get("_p"))
            rows.append([run, op_names[ev.metadata_id], device, start, dur,
                         None if flow is None else idx.value(flow)])
    done = _completions(host, idx)
    rows = [[run, op, device, start,
             dur if flow not in done else max(dur, done[flow]((start, start + dur)) - start)]
            for run, op, device, start, dur, flow in rows]
    first = {}
    for run, _, _, start, _ in rows:
        first[run] = min(first.get(run, start), start)
    opened = StepWindows(zip(steps.starts, steps.ends, steps.steps), open_ended=True)
    order = {r: i for i, r in enumerate(sorted(first))}  # a run's number without annotations
    step_of = {r: (run_step[r] if r in run_step else opened.step_at(first[r])) if steps
               else order[r] for r in first}
    return [[*programs[run], op, device, step_of[run], start, dur]
            for run, op, device, start, dur in rows], bool(steps)


def _completions(host, idx: Plane) -> dict:
    """Flow id -> (the op's event (start, end) -> its completion), from the ``end: <op>``
    markers (``harness.trace.completions``), by what the marker's line recorded last before
    it: the op's own event (its end), a ``ThunkExecutor::Execute`` event that started at or
    after the op's event end (its start), else the marker."""
    out = {}
    for line in host.lines:
        events = [(idx.event_names.get(ev.metadata_id, ""), start, start + dur,
                   idx.stats(ev.stats)) for ev, start, dur in events_of(line)]
        for name, at, _, stats in events:
            if not name.startswith("end: ") or "_c" not in stats:
                continue
            last = max(((end, name == "ThunkExecutor::Execute", start)
                        for name, start, end, _ in events if end < at), default=None)
            out[stats["_c"]] = lambda op, at=at, last=last: _completion(op, at, last)
    return out


def _completion(op: tuple, at: int, last: tuple | None) -> int:
    start, end = op
    if last is None:
        return at
    last_end, is_run, last_start = last
    if not is_run and (last_start, last_end) == (start, end):
        return end
    return last_start if is_run and last_start >= end else at


def gpu_rows(space, schedule_of=None) -> tuple[list, bool]:
    annotated, _ = host_steps(space)
    rows, sched, stepped = [], None, bool(annotated)
    for device, plane in device_planes(space, r"^/device:GPU:(\d+)$"):
        idx = Plane(plane)
        steps = device_steps(idx) or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        stepped = stepped or bool(steps)
        kernels = []
        for line in plane.lines:
            if line.name in gpu._NON_KERNEL_LINES:
                continue
            for ev, start, dur in events_of(line):
                stats = idx.stats(ev.stats)
                op = stats.get("hlo_op") or idx.stats(
                    plane.event_metadata[ev.metadata_id].stats).get("hlo_op")
                if op:
                    kernels.append(graphs.Kernel(start, dur, stats.get("hlo_module", ""), op,
                                              idx.event_names.get(ev.metadata_id, ""),
                                              gpu.GRAPH_STAT in stats,
                                              str(stats.get("program_id", ""))))
        kernels.sort(key=lambda k: k.start)
        if any(k.in_graph for k in kernels):
            if sched is None:
                program = next(k.module for k in kernels if k.in_graph)
                sched = graphs.schedule(schedule_of(program) if schedule_of else None)
            graphs.attribute(kernels, sched)
        rows += _fold(kernels, steps, device)
    return rows, stepped


def _fold(kernels, steps: StepWindows, device: int) -> list:
    """One execution per run of consecutive kernels of one op (``harness.trace.gpu._fold``'s
    rule, one kernel at a time)."""
    rows, prev, memset_row, launched = [], None, {}, set()
    for k in kernels:
        step = steps.step_at(k.start) if steps else 0
        key = (k.module, k.program_id, k.op, step)
        waiting = memset_row.pop(key, None)
        again = key == prev and k.name in launched and not k.in_graph
        if (key == prev and not again) or waiting is not None:
            rows[len(rows) - 1 if key == prev else waiting][6] += k.dur
            launched.add(k.name)
            continue
        rows.append([k.module, k.program_id, k.op, device, step, k.start, k.dur])
        launched = {k.name}
        if k.name.startswith("Memset"):
            memset_row[key] = len(rows) - 1
        prev = key
    return rows


def tpu_rows(space) -> tuple[list, bool]:
    annotated, _ = host_steps(space)
    rows, stepped = [], bool(annotated)
    for device, plane in device_planes(space, r"^/device:TPU:(\d+)$"):
        idx = Plane(plane)
        line = idx.lines.get("XLA Ops")
        if line is None:
            continue
        steps = device_steps(idx) or StepWindows(
            zip(annotated.starts, annotated.ends, annotated.steps), open_ended=True)
        stepped = stepped or bool(steps)
        meta = {k: idx.stats(m.stats) for k, m in plane.event_metadata.items()}
        ids = [idx.stat_ids.get(n) for n in ("device_duration_ps", "device_offset_ps",
                                             "hlo_op")]
        in_ps = any(ev.stats for ev in line.events)  # stats: self times in ps, then rounded
        host, begin, dur, ops = [], [], [], []
        for ev in line.events:
            m = plane.event_metadata[ev.metadata_id]
            at = line.timestamp_ns * 1000 + ev.offset_ps
            b, d, own = at, ev.duration_ps, None
            for st in ev.stats:
                if st.metadata_id == ids[0]:
                    d = st.int64_value or st.uint64_value
                elif st.metadata_id == ids[1]:
                    b = st.int64_value or st.uint64_value
                elif st.metadata_id == ids[2]:
                    own = str(idx.value(st))
            name = tpu.op_name(m.name, m.display_name,
                               str(meta[ev.metadata_id].get("hlo_op") or ""))
            ops.append(own if own is not None and not m.display_name else name)
            host.append(at), begin.append(b), dur.append(d)
        host = np.asarray(host, np.int64)
        if in_ps:
            start = host // 1000
            self_ns = (tpu.self_times(begin, dur) + 500) // 1000
        else:
            start = host // 1000
            self_ns = tpu.self_times(start, np.asarray(dur, np.int64) // 1000)
        step = steps.assign(start) if steps else np.zeros(len(start), np.int64)
        modules = [meta[ev.metadata_id].get("hlo_module", "") for ev in line.events]
        if not all(modules):
            found = [idx.stats(ev.stats).get("hlo_module") or meta[ev.metadata_id].get(
                "hlo_module", "") for ev in line.events]
            if all(found) and "hlo_module" in idx.stat_ids:
                modules = found
            else:
                mod_line = idx.lines.get("XLA Modules")
                windows = StepWindows([(s, s + d, ev.metadata_id) for ev, s, d in
                                       events_of(mod_line)] if mod_line else [])
                modules = [tpu._MODULE_SUFFIX.sub("", idx.event_names.get(int(k), ""))
                           for k in windows.assign(start)]
        for i, ev in enumerate(line.events):
            program = meta[ev.metadata_id].get("program_id")
            rows.append([modules[i], "" if program is None else str(program), ops[i], device,
                         int(step[i]), int(start[i]), int(self_ns[i])])
    return rows, stepped


def reference_events(source, schedule_of=None) -> tuple[pd.DataFrame, bool]:
    """(EVENTS, stepped) of a trace file or directory, as the previous decoder read it."""
    space = XSpace.FromString(find_trace_file(source).read_bytes())
    tpu_planes = device_planes(space, r"^/device:TPU:(\d+)$")
    gpu_planes = device_planes(space, r"^/device:GPU:(\d+)$")
    if any(any(line.name == "XLA Ops" for line in p.lines) for _, p in tpu_planes):
        rows, stepped = tpu_rows(space)
    elif any(any(m.name == "hlo_op" for m in p.stat_metadata.values()) for _, p in gpu_planes):
        rows, stepped = gpu_rows(space, schedule_of)
    else:
        rows, stepped = cpu_rows(space)
    df = pd.DataFrame(rows, columns=[schema.PROGRAM, schema.PROGRAM_ID, schema.OP,
                                     schema.DEVICE, schema.STEP, schema.START_NS,
                                     schema.DURATION_NS])
    df = df[df[schema.STEP] >= 0]
    steps = sorted(df[schema.STEP].unique())
    df = df.assign(**{schema.STEP: df[schema.STEP].map({s: i for i, s in enumerate(steps)})})
    return df.reset_index(drop=True), stepped


def same_events(got: pd.DataFrame, expect: pd.DataFrame) -> None:
    """Assert that EVENTS ``got`` are ``expect`` (``reference_events``), row for row."""
    names = [schema.PROGRAM, schema.PROGRAM_ID, schema.OP]
    got = got.astype({c: str for c in names}).astype({schema.DEVICE: np.int64,
                                                      schema.STEP: np.int64})
    pd.testing.assert_frame_equal(got, expect.astype({c: str for c in names}),
                                  check_dtype=False)
