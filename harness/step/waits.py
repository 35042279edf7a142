"""Why the devices wait: each step's period, whole, and the time a device waited in it, by cause.

A step's period runs from its first op's start to the next step's first op's start (the last
step's, to its last op's end): the step window ``harness.step.timeline`` splits, and the gap
before the next step. A device waits in it where no op of it runs (idle) and, inside a
collective, before the last device of its group arrived (``harness.measure.arrivals``). Each
piece of idle is given to one cause (``schema.WAIT_CAUSES``), first that applies:

- input: a host-to-device copy or infeed ran (``harness.trace.host_events``);
- host: a host callback or a device-to-host transfer ran;
- dispatch: the piece lies between two executions (the ops before and after it are of two steps
  or two programs) and the host launched an execution during it (a launch event meets it): the
  device waited for the host to launch the next (HTA's host wait; xprof's
  host-processing-bound);
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
from harness.step.timeline import merged
from harness.trace.host_events import DISPATCH, HOST, INPUT

_NS = 1e-9


def covered(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Per interval [a, b), how much of it the union (disjoint, sorted ``us``/``ue``)
    covers."""
    if not len(us) or not len(a):
        return np.zeros(len(a), np.int64)
    before = np.concatenate([[0], np.cumsum(ue - us)])

    def upto(t):  # union length before t
        i = np.searchsorted(us, t, side="right")
        j = np.maximum(i - 1, 0)
        return np.where(i > 0, before[j] + np.minimum(t, ue[j]) - us[j], 0)

    return upto(np.asarray(b)) - upto(np.asarray(a))


def saturated(events: pd.DataFrame, cores: int) -> tuple[np.ndarray, np.ndarray]:
    """The intervals in which at least ``cores`` devices of ``events`` (one host's) ran an op:
    each device's ops merged first, so a device counts once."""
    edges, steps = [], []
    for _, g in events.groupby(schema.DEVICE, observed=True, sort=False):
        s = g[schema.START_NS].to_numpy(np.int64)
        us, ue = merged(s, s + g[schema.DURATION_NS].to_numpy(np.int64))
        edges += [us, ue]
        steps += [np.ones(len(us), np.int64), -np.ones(len(ue), np.int64)]
    if not edges:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    t, d = np.concatenate(edges), np.concatenate(steps)
    order = np.lexsort((d, t))  # at one time, ends before starts
    t, n = t[order], np.cumsum(d[order])
    full = n >= cores
    start = t[:-1][full[:-1]]
    end = t[1:][full[:-1]]
    keep = end > start
    return merged(start[keep], end[keep])


def _union(host: pd.DataFrame, kind: str, device: int) -> tuple[np.ndarray, np.ndarray]:
    h = host[(host[schema.KIND] == kind) & host[schema.DEVICE].isin([-1, device])]
    s = h[schema.START_NS].to_numpy(np.int64)
    return merged(s, s + h[schema.DURATION_NS].to_numpy(np.int64))


def _launching(a: np.ndarray, b: np.ndarray, host: pd.DataFrame) -> np.ndarray:
    """Per gap [a, b]: whether the host was launching an execution in it (a launch event
    of ``host`` meets it): the intervals that start by b, less those that ended before a."""
    h = host[host[schema.KIND] == DISPATCH]
    s = np.sort(h[schema.START_NS].to_numpy(np.int64))
    e = np.sort(s if not len(h) else
                (h[schema.START_NS] + h[schema.DURATION_NS]).to_numpy(np.int64))
    return np.searchsorted(s, b, side="right") - np.searchsorted(e, a, side="left") > 0


def _device_waits(ev: pd.DataFrame, host: pd.DataFrame, sat) -> pd.DataFrame:
    """Per step of one device's EVENTS (``ev``): its period and its idle by cause."""
    ev = ev.sort_values(schema.START_NS, kind="stable")
    s = ev[schema.START_NS].to_numpy(np.int64)
    e = s + ev[schema.DURATION_NS].to_numpy(np.int64)
    step = ev[schema.STEP].to_numpy(np.int64)
    prog = ev.groupby([c for c in (schema.PROGRAM, schema.PROGRAM_ID) if c in ev.columns],
                      observed=True, sort=False).ngroup().to_numpy()
    device = int(ev[schema.DEVICE].iloc[0])
    first = pd.Series(s).groupby(step).min()
    last = pd.Series(e).groupby(step).max()
    steps = first.index.to_numpy()
    period = np.append(first.to_numpy()[1:], last.to_numpy()[-1]) - first.to_numpy()
    reach = np.maximum.accumulate(e)  # s is sorted: the union's pieces end where reach < next s
    gap = np.flatnonzero(s[1:] > reach[:-1])
    a, b = reach[gap], s[gap + 1]
    # the op before each gap: the last to end among those before it (its end is the reach)
    ended = np.where(e == reach, np.arange(len(e)), -1)
    prev = np.maximum.accumulate(ended)[gap]
    nxt = gap + 1
    length = b - a
    inp = covered(a, b, *_union(host, INPUT, device))
    on_host = np.minimum(covered(a, b, *_union(host, HOST, device)), length - inp)
    rest = length - inp - on_host
    between = (step[prev] != step[nxt]) | (prog[prev] != prog[nxt])
    dispatch = np.where(between & _launching(a, b, host), rest, 0)
    core = np.where(between, 0, np.minimum(rest, covered(a, b, *sat)))
    parts = {schema.WAIT_DISPATCH_S: dispatch, schema.WAIT_INPUT_S: inp,
             schema.WAIT_HOST_S: on_host, schema.WAIT_CORE_S: core,
             schema.WAIT_UNEXPLAINED_S: rest - dispatch - core}
    owner = np.searchsorted(steps, step[prev])  # a gap is its earlier op's step's
    out = pd.DataFrame({schema.STEP: steps, schema.DEVICE: device, schema.PERIOD_S: period * _NS})
    for name, v in parts.items():
        out[name] = np.bincount(owner, weights=v, minlength=len(steps)) * _NS
    return out


def waits(events: pd.DataFrame, host: pd.DataFrame | None = None, *,
          collectives: Collection[str] = (), groups: Groups | None = None,
          clock_offsets_ns: Mapping[int, int] | None = None,
          cores: int | None = None, arrived: pd.DataFrame | None = None
          ) -> tuple[pd.DataFrame, str]:
    """``schema.WAITS`` of ``events`` (EVENTS, containers left out; a HOST column for several
    hosts), and a sentence naming the causes the trace cannot tell apart ("" for none).
    ``host``: the trace's HOST_EVENTS (None or empty: none recorded); ``collectives``: the ops
    whose threads wait for their group, ``groups`` their replica groups, ``clock_offsets_ns``
    the hosts' clocks aligned (``harness.measure.arrivals``); ``cores``: the host's cores where
    its devices are threads on them (None: not such a host, or unknown); ``arrived``: the
    ARRIVALS of ``events`` on those clocks where the caller has them already."""
    if events.empty:
        return schema.empty(schema.WAITS), ""
    host = host if host is not None else schema.empty(schema.HOST_EVENTS)
    ev = events if schema.HOST in events.columns else events.assign(**{schema.HOST: 0})
    arr = (arrived if arrived is not None
           else arrivals(ev, collectives, groups, clock_offsets_ns) if collectives
           else schema.empty(schema.ARRIVALS))
    parts, sat = [], {}
    for h, on in ev.groupby(schema.HOST, observed=True, sort=True):
        mine = host[host[schema.HOST] == h]
        sat[h] = (saturated(_running(on, arr), cores) if cores
                  else (np.zeros(0, np.int64),) * 2)
        for _, one in on.groupby(schema.DEVICE, observed=True, sort=True):
            parts.append(_device_waits(one, mine, sat[h]).assign(**{schema.HOST: h}))
    out = pd.concat(parts, ignore_index=True)
    peers, core = _peer_waits(arr, out, sat)
    out[schema.WAIT_PEERS_S] = peers
    out[schema.WAIT_CORE_S] += core
    out[schema.WAITING_S] = out[list(schema.WAIT_CAUSES)].sum(axis=1)
    return out[list(schema.WAITS)], untold(host, ev[schema.HOST].unique(), cores)


def _running(ev: pd.DataFrame, arr: pd.DataFrame) -> pd.DataFrame:
    """``ev`` with each collective from its group's last arrival: a thread waiting in one is
    blocked, not running (``harness.measure.shares`` counts it the same)."""
    mine = arr[arr.index.isin(ev.index)]
    if mine.empty:
        return ev
    out = ev.copy()
    out.loc[mine.index, schema.START_NS] = mine[schema.LAST_ARRIVE_NS]
    out.loc[mine.index, schema.DURATION_NS] = np.maximum(
        mine[schema.END_NS] - mine[schema.LAST_ARRIVE_NS], 0)
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
    keys = [arr[schema.STEP], arr[schema.HOST], arr[schema.DEVICE]]
    rows = pd.MultiIndex.from_frame(out[[schema.STEP, schema.HOST, schema.DEVICE]])
    split = pd.DataFrame({"peers": b - a - core, "core": core}, index=arr.index)
    per = split.groupby(keys).sum().reindex(rows).fillna(0) * _NS
    return per["peers"].to_numpy(), per["core"].to_numpy()


def untold(host: pd.DataFrame, hosts, cores: int | None) -> str:
    """Which causes a trace cannot tell apart: without the host's launch events (a trace at
    ``host_tracer_level`` 0, or another tool's), the waits between executions."""
    launched = set(host.loc[host[schema.KIND] == DISPATCH, schema.HOST].tolist())
    missing = [int(h) for h in hosts if int(h) not in launched]
    if not missing:
        return ""
    who = "" if len(missing) == len(list(hosts)) else \
        f" of process(es) {', '.join(map(str, missing))}"
    return (f"the trace{who} holds no host launch events (host_tracer_level 1 records them): "
            f"waiting between executions (dispatch, input, host callbacks) is unexplained")


def cited(events: pd.DataFrame, host: pd.DataFrame | None) -> dict[str, int]:
    """The host events the causes could be read from: per kind, how many lie (in part)
    within the span of ``events``' steps on their host."""
    if host is None or host.empty or events.empty:
        return {}
    ev = events if schema.HOST in events.columns else events.assign(**{schema.HOST: 0})
    s = ev[schema.START_NS]
    span = pd.DataFrame({"lo": s.groupby(ev[schema.HOST]).min(),
                         "hi": (s + ev[schema.DURATION_NS]).groupby(ev[schema.HOST]).max()})
    h = host.join(span, on=schema.HOST, how="inner")
    end = h[schema.START_NS] + h[schema.DURATION_NS]
    inside = (end >= h["lo"]) & (h[schema.START_NS] <= h["hi"])
    return {str(k): int(v) for k, v in h[inside].groupby(schema.KIND).size().items()}
