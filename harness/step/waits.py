"""Why the devices wait: each step's period, whole, and the time a device waited in it, by cause.

A step's period runs from its first op's start to the next step's first op's start (the last
step's, to its last op's end): the step window ``harness.step.timeline`` splits, and the gap
before the next step. A device waits in it where no op of it runs (idle) and, inside a
collective, before the last device of its group arrived (``harness.measure.arrivals``). Each
piece of idle is given to one cause (``schema.WAIT_CAUSES``), first that applies:

- input: a host-to-device copy or infeed ran (``harness.trace.host_events``);
- host: a host callback or a device-to-host transfer ran;
- between two executions (the ops before and after the piece are of two steps or two
  programs) where the host launched an execution during it (a launch event meets it), the
  device waited for the host (HTA's host wait; xprof's host-processing-bound), split by what
  the host did:
  - dispatch: the part the runtime's launch events cover (PjRt's ``Execute``): the runtime
    launching the program (core, where the host's cores all ran ops meanwhile: the device's
    own launch waited for one);
  - python: the rest, which no runtime event covers: the host busy with its own work between
    steps (the user's Python: data loading, logging, a sleep), by the names of the user's
    annotations or Python frames that cover it where the trace holds them;
  (``harness.step.between``);
- core: inside one execution, on a host whose devices are threads on shared cores
  (``cores`` known), while at least as many ops ran on the host as it has cores (threads
  waiting in a collective are not running);
- unexplained: the rest.

Waits at collectives are the peers' cause, but for the part in which the host's cores all ran
ops: there the late peer was ready and had no core, the core's cause (8 device threads on 2
cores). The causes add up to ``waiting_s``. Where the trace
holds no launch events (a trace taken at ``host_tracer_level`` 0, or by another tool), waiting
between executions is unexplained and ``untold`` says which causes it cannot tell apart.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from harness import schema
from harness.measure.arrivals import Groups, arrivals
from harness.step import runs
from harness.step.between import launch, launching, python_names, union
from harness.step.gaps import Gaps, host_ids
from harness.step.runs import covered
from harness.trace.host_events import ANNOTATION, DISPATCH, HOST, INPUT

_NS = 1e-9


def saturated(events: pd.DataFrame, cores: int) -> tuple[np.ndarray, np.ndarray]:
    """The intervals in which at least ``cores`` devices of ``events`` (one host's) ran an op:
    each device's ops merged first, so a device counts once."""
    s = events[schema.START_NS].to_numpy(np.int64)
    return _saturated(events[schema.DEVICE].to_numpy(np.int64), s,
                      s + events[schema.DURATION_NS].to_numpy(np.int64), cores)


def _saturated(device: np.ndarray, s: np.ndarray, e: np.ndarray, cores: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """``saturated`` of the intervals [s, e) run on ``device``s."""
    if not runs.in_order(device, s):
        by = runs.order(device, s)
        device, s, e = device[by], s[by], e[by]
    us, ue = runs.unions(runs.starts(device), s, e)  # each device's, merged
    # +1 where a device's piece starts, -1 where one ends: the running sum counts devices busy
    t = np.stack([us, ue], axis=1).ravel()  # start, end, start, ...: one sorted run a device
    rise = np.tile(np.array([1, 0], np.int8), len(us))
    by = runs.order(t, rise)  # at one time, ends before starts
    t, n = t[by], np.cumsum(2 * rise[by] - 1, dtype=np.int32)
    del by, rise
    # the pieces between edges in which ``cores`` or more ran, of some length: sorted and
    # disjoint, those that touch made one (``merged`` of them)
    keep = (n[:-1] >= cores) & (t[1:] > t[:-1])
    return runs.joined(t[:-1][keep], t[1:][keep])


def _device_waits(g: Gaps, host: pd.DataFrame, sat: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (host, device, step) of the gaps ``g``, sorted by them: its period and its idle
    by cause (module docstring), and its python part by name (``schema.WAIT_NAMES``);
    ``host``: the HOST_EVENTS, ``sat``: per host, the intervals its cores all ran ops
    (``saturated``)."""
    a, b = g.a, g.b
    on = g.host[g.prev]  # each gap's host: the gaps are sorted by it
    inp = _covered_by(host, INPUT, g, on)  # (None: no such events, none covered)
    rest = b - a if inp is None else b - a - inp
    on_host = _covered_by(host, HOST, g, on)
    if on_host is not None:
        on_host = np.minimum(on_host, rest)
        rest = rest - on_host
    # between two executions: the ops either side are of two steps or two programs (few)
    between = np.flatnonzero((g.step[g.prev] != g.step[g.next]) |
                             (g.prog[g.prev] != g.prog[g.next]))
    launched = np.zeros(len(between), bool)  # of those between: the host launched in it
    busy = np.zeros(len(a), np.int64)
    each = np.unique(g.host[g.new])
    for h, lo, hi in zip(each, np.searchsorted(on, each), np.searchsorted(on, each, "right")):
        # the host's gaps between executions while it launched one; while its cores all ran
        at = slice(*np.searchsorted(between, [lo, hi]))
        i = between[at]
        launched[at] = launching(a[i], b[i], host[host[schema.HOST] == h])
        busy[lo:hi] = covered(a[lo:hi], b[lo:hi], *sat[int(h)])
    # the host's wait split: the runtime's launch, the part of it while the cores all ran ops
    # (the device's launch waited for a core), the rest the host's own work
    own, cored = launch(host, g, on, between, sat)
    r = rest[between]
    dispatch = np.where(launched, np.minimum(own, r), 0)
    cored = np.where(launched, np.minimum(cored, r - dispatch), 0)
    python = np.where(launched, r - dispatch - cored, 0)
    core = np.minimum(rest, busy)
    core[between] = cored
    unexplained = rest - core
    unexplained[between] -= dispatch + python
    out, owner = g.steps()  # a gap is its earlier op's step's
    n = len(out)
    out[schema.WAIT_DISPATCH_S] = _summed(owner, n, dispatch, between)
    out[schema.WAIT_PYTHON_S] = _summed(owner, n, python, between)
    out[schema.WAIT_INPUT_S] = _summed(owner, n, inp)
    out[schema.WAIT_HOST_S] = _summed(owner, n, on_host)
    out[schema.WAIT_CORE_S] = _summed(owner, n, core)
    out[schema.WAIT_UNEXPLAINED_S] = _summed(owner, n, unexplained)
    return out, python_names(host, g, on, between, python, owner, out)


def _summed(owner: np.ndarray, n: int, v: np.ndarray | None, at: np.ndarray | None = None
            ) -> np.ndarray:
    """Per step (``owner``: each gap's, of ``n``) the gaps' ``v`` summed, seconds; ``at``:
    the gaps ``v`` is of (default: every one); zeros where ``v`` is None."""
    if v is None:
        return np.zeros(n)
    return np.bincount(owner if at is None else owner[at], weights=v, minlength=n) * _NS


def _covered_by(host: pd.DataFrame, kind: str, g: Gaps, on: np.ndarray) -> np.ndarray | None:
    """Per gap of ``g`` (``on``: its host): how much of it its host's events of ``kind`` for
    its device (or for every device: -1) cover (None where there are none); a union per
    device, of the hosts that have such events only."""
    mine = host[host[schema.KIND] == kind]
    if mine.empty:
        return None
    out = np.zeros(len(g.a), np.int64)
    device = g.device[g.prev]
    for h in np.intersect1d(g.host[g.new], mine[schema.HOST].to_numpy(np.int64)).tolist():
        for d in np.unique(g.device[g.new & (g.host == h)]).tolist():
            m = (on == h) & (device == d)
            out[m] = covered(g.a[m], g.b[m], *union(mine[mine[schema.HOST] == h], d))
    return out


def waits(events: pd.DataFrame, host: pd.DataFrame | None = None, **kw
          ) -> tuple[pd.DataFrame, str]:
    """``waits_named`` less the names."""
    return waits_named(events, host, **kw)[:2]


def waits_named(events: pd.DataFrame, host: pd.DataFrame | None = None, *,
                collectives: Collection[str] = (), groups: Groups | None = None,
                clock_offsets_ns: Mapping[int, int] | None = None,
                cores: int | None = None, arrived: pd.DataFrame | None = None
                ) -> tuple[pd.DataFrame, str, pd.DataFrame]:
    """``schema.WAITS`` of ``events`` (EVENTS, containers left out; a HOST column for several
    hosts), a sentence naming the causes the trace cannot tell apart ("" for none) and the
    python part by the names of the user's annotations that cover it (``schema.WAIT_NAMES``,
    ``harness.step.between.python_names``).
    ``host``: the trace's HOST_EVENTS (None or empty: none recorded); ``collectives``: the ops
    whose threads wait for their group, ``groups`` their replica groups, ``clock_offsets_ns``
    the hosts' clocks aligned (``harness.measure.arrivals``); ``cores``: the host's cores where
    its devices are threads on them (None: not such a host, or unknown); ``arrived``: the
    ARRIVALS of ``events`` on those clocks where the caller has them already."""
    if events.empty:
        return schema.empty(schema.WAITS), "", schema.empty(schema.WAIT_NAMES)
    host = host if host is not None else schema.empty(schema.HOST_EVENTS)
    arr = (arrived if arrived is not None
           else arrivals(events, collectives, groups, clock_offsets_ns) if collectives
           else schema.empty(schema.ARRIVALS))
    g = Gaps(events)
    sat = _saturated_hosts(g, events.index, arr, cores)
    out, names = _device_waits(g, host, sat)
    peers, core = _peer_waits(arr, out, sat)
    out[schema.WAIT_PEERS_S] = peers
    out[schema.WAIT_CORE_S] += core
    out[schema.WAITING_S] = out[list(schema.WAIT_CAUSES)].sum(axis=1)
    each = events[schema.HOST].unique() if schema.HOST in events.columns else [0]
    return out[list(schema.WAITS)], untold(host, each, cores), names


def _saturated_hosts(g: Gaps, index: pd.Index, arr: pd.DataFrame, cores: int | None
                     ) -> dict:
    """Per host of the gaps' ops ``g`` (``index``: their EVENTS' index): the intervals in
    which its cores all ran ops (``saturated``; none where ``cores`` is not known), each
    collective from its group's last arrival: a thread waiting in one is blocked, not running
    (``harness.measure.shares`` counts it the same)."""
    each = np.unique(g.host[g.new]).tolist()
    if not cores:
        return {h: (np.zeros(0, np.int64),) * 2 for h in each}
    s, e = g.s, g.e
    at = index.get_indexer(arr.index)  # the collectives' rows (ARRIVALS: EVENTS' index)
    mine = arr[at >= 0]
    if len(mine):
        place = np.empty(len(g.by), np.int64)
        place[g.by] = np.arange(len(g.by))
        at = place[at[at >= 0]]  # their places among the gaps' ops
        s, e = s.copy(), e.copy()
        s[at] = mine[schema.LAST_ARRIVE_NS].to_numpy(np.int64)
        e[at] = s[at] + np.maximum(mine[schema.END_NS].to_numpy(np.int64) - s[at], 0)
    out = {}
    for h in each:  # per host (its ops together): its devices share its cores
        lo, hi = np.searchsorted(g.host, h), np.searchsorted(g.host, h, "right")
        out[h] = _saturated(g.device[lo:hi], s[lo:hi], e[lo:hi], cores)
    return out


def _peer_waits(arr: pd.DataFrame, out: pd.DataFrame, sat: dict) -> tuple[np.ndarray, ...]:
    """Per row of ``out``: the device's waits at collectives in the step, in seconds, split in
    two: while its host's cores all ran ops (a late peer was ready but had no core: the core's
    cause) and the rest (the peers')."""
    arr = arr[arr[schema.WAIT_NS] > 0]
    if arr.empty:
        return np.zeros(len(out)), np.zeros(len(out))
    a = arr[schema.ARRIVE_NS].to_numpy(np.int64)
    b = arr[schema.LAST_ARRIVE_NS].to_numpy(np.int64)
    core = np.zeros(len(arr), np.int64)
    for h, (us, ue) in sat.items():
        on = arr[schema.HOST].to_numpy() == h
        core[on] = covered(a[on], b[on], us, ue)
    # each arrival's row of ``out`` (its step on its device), its waits summed there
    rows = pd.MultiIndex.from_frame(out[[schema.STEP, schema.HOST, schema.DEVICE]])
    at = rows.get_indexer(pd.MultiIndex.from_arrays(
        [arr[schema.STEP], arr[schema.HOST], arr[schema.DEVICE]]))
    found = at >= 0
    peers, mine = np.zeros(len(out), np.int64), np.zeros(len(out), np.int64)
    np.add.at(peers, at[found], (b - a - core)[found])
    np.add.at(mine, at[found], core[found])
    return peers * _NS, mine * _NS


def untold(host: pd.DataFrame, hosts, cores: int | None) -> str:
    """Which causes a trace cannot tell apart: without the host's launch events (a trace at
    ``host_tracer_level`` 0, or another tool's), the waits between executions."""
    launched = set(host.loc[host[schema.KIND] == DISPATCH, schema.HOST].tolist())
    missing = [int(h) for h in hosts if int(h) not in launched]
    if not missing:
        return ""
    who = "" if len(missing) == len(list(hosts)) else \
        f" of process(es) {', '.join(map(str, missing))}"
    return (f"the trace{who} holds no host launch events: waiting between executions "
            f"(dispatch, python, input, host callbacks) is unexplained; a trace taken with "
            f"jax.profiler.ProfileOptions().host_tracer_level = 1 records them, as harness run "
            f"and harness profile do")


def cited(events: pd.DataFrame, host: pd.DataFrame | None) -> dict[str, int]:
    """The host events the causes could be read from: per kind, how many lie (in part)
    within the span of ``events``' steps on their host (the runtime's: the user's annotations
    name a cause, ``WAIT_PYTHON_NAMES``)."""
    if host is not None:
        host = host[host[schema.KIND] != ANNOTATION]
    if host is None or host.empty or events.empty:
        return {}
    on, s = host_ids(events), events[schema.START_NS]
    span = pd.DataFrame({"lo": s.groupby(on).min(),
                         "hi": (s + events[schema.DURATION_NS]).groupby(on).max()})
    h = host.join(span, on=schema.HOST, how="inner")
    end = h[schema.START_NS] + h[schema.DURATION_NS]
    inside = (end >= h["lo"]) & (h[schema.START_NS] <= h["hi"])
    return {str(k): int(v) for k, v in h[inside].groupby(schema.KIND).size().items()}
