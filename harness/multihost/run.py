"""Multi-host runs on JAX's multi-controller runtime: one process per host, one merged run.

Every process joins the job (``initialize``: ``jax.distributed.initialize``, gloo CPU collectives),
builds the workload on the global mesh and traces its own devices. The per-process EVENTS go to
process 0 through the coordination service's key-value store (no shared filesystem needed);
process 0 builds and stores ONE run from them (``harness.measure.per_host``) and posts the
outcome, which the other processes wait for, so that every process's exit code says whether the
run was stored. Other processes write nothing under ``out``; their scratch space is the system
temp directory.
"""
from __future__ import annotations

import io
import itertools
import json
import logging
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.capture.steps import STEPS, capture
from harness.errors import HarnessError, one_line
from harness.multihost.store import store_merged
from harness.runs.workload import build_workload
from harness.trace import hosts
from harness.trace.load import load_events
from predictions import hardware

# jax is imported inside the functions that run it: importing this module leaves XLA_FLAGS
# settable (harness.devices).

log = logging.getLogger(__name__)

INIT_GRACE_S = 5          # jax's own init deadline trails ours, so our message comes first
INIT_EXIT_CODE = 2
WAIT_S = 600.0            # how long one process waits for another's table or outcome
BARRIER_MS = 60_000       # process 0 waits this long for the others to read the outcome
CHUNK_BYTES = 1 << 20     # key-value values stay well under gRPC's message limit
KEY_PREFIX = "scaling-harness/run"
LOOPBACK = ("127.", "localhost", "::1", "[::1]")
_rounds = itertools.count()  # every process runs in the same order: one key namespace per run


class Cluster(NamedTuple):
    """This process's place in the job."""

    process_index: int
    process_count: int


def parse_coordinator(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise HarnessError(f"--coordinator {address!r} is not HOST:PORT, e.g. 10.0.0.2:8476 or "
                           f"127.0.0.1:8476")
    return host, int(port)


def _check_args(coordinator, num_processes, process_id, timeout_s) -> None:
    given = [v is not None for v in (coordinator, num_processes, process_id)]
    if any(given) and not all(given):
        raise HarnessError("give all of --coordinator, --num-processes and --process-id, or none "
                           "of them (auto-detection on TPU VMs, SLURM and Open MPI)")
    if coordinator is not None:
        parse_coordinator(coordinator)
        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise HarnessError(f"--process-id {process_id} is not valid for --num-processes "
                               f"{num_processes}; valid: 0..{max(num_processes, 1) - 1}")
    if not timeout_s > 0:
        raise HarnessError(f"--init-timeout must be positive, got {timeout_s}")


def _timeout_message(coordinator, num_processes, process_id, timeout_s) -> str:
    if coordinator is None:
        return (f"the auto-detected JAX cluster did not come up within {timeout_s:g} s; check that "
                f"every process was started (or pass --coordinator/--num-processes/--process-id)")
    who = f"process {process_id} of {num_processes}"
    try:
        socket.create_connection(parse_coordinator(coordinator), timeout=1.0).close()
    except OSError as e:
        return (f"{who}: no JAX coordinator answered at {coordinator} within {timeout_s:g} s "
                f"({e.strerror or e}); start process 0 with the same --coordinator, or fix the "
                f"address")
    return (f"{who}: the coordinator at {coordinator} did not see all {num_processes} processes "
            f"within {timeout_s:g} s; start exactly {num_processes} processes with "
            f"--num-processes {num_processes} and distinct --process-id 0..{num_processes - 1}")


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, timeout_s: float = 300.0,
               on_timeout: Callable[[str], None] | None = None) -> Cluster:
    """``jax.distributed.initialize`` with gloo CPU collectives, bounded by ``timeout_s``.

    jax aborts the process when its own deadline passes (no exception, a C++ stack trace), and
    a thread cannot interrupt the call: so a watchdog calls ``on_timeout(message)`` (default:
    log it) with a one-line explanation first and ends the process with code 2.
    """
    import jax

    _check_args(coordinator, num_processes, process_id, timeout_s)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # jax's preemption service catches SIGTERM as a preemption notice, which nothing here acts
    # on: without it SIGTERM (a scheduler's cancel, `harness launch` stopping us) ends the process.
    jax.config.update("jax_enable_preemption_service", False)
    # Only bind the coordinator to every interface when other hosts must reach it.
    local = coordinator is not None and coordinator.startswith(LOOPBACK)

    def expired():
        (on_timeout or log.error)(_timeout_message(coordinator, num_processes, process_id,
                                                   timeout_s))
        leave(INIT_EXIT_CODE)

    watchdog = threading.Timer(timeout_s, expired)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(coordinator, num_processes, process_id,
                                   initialization_timeout=math.ceil(timeout_s) + INIT_GRACE_S,
                                   coordinator_bind_address=coordinator if local else None)
    except (RuntimeError, ValueError) as e:  # no cluster detected, backend already started
        hint = "" if coordinator else ("; no TPU VM, SLURM or Open MPI job was detected: pass "
                                       "--coordinator, --num-processes and --process-id")
        raise HarnessError(f"jax.distributed.initialize failed: {one_line(e)}"
                           f"{hint}") from None
    finally:
        watchdog.cancel()
    cluster = Cluster(jax.process_index(), jax.process_count())
    if num_processes is not None and cluster.process_count != num_processes:
        raise HarnessError(f"--num-processes {num_processes}, but the coordinator at "
                           f"{coordinator} runs a job of {cluster.process_count} processes")
    log.info("process %d of %d joined", cluster.process_index, cluster.process_count)
    return cluster


def joined() -> bool:
    """Whether this process has joined a multi-process job."""
    import jax

    return jax.distributed.is_initialized()


def leave(code: int) -> None:
    """End this process now, skipping jax's shutdown barrier (which would wait for peers that
    may be stuck in a collective with it): peers see the process gone instead."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


# --- exchanging tables through the coordination service -----------------------------------------
def _client():
    """The key-value client; jax 0.10 to 0.12 expose it only as a private global."""
    try:
        from jax._src import distributed as jax_distributed
        client = jax_distributed.global_state.client
    except (ImportError, AttributeError):
        raise HarnessError("this jax has no jax._src.distributed.global_state.client: "
                           "multi-host tables cannot be exchanged; use jax 0.10 to 0.12") from None
    return client


class PeerError(HarnessError):
    """Another process failed, or sent nothing in time."""


def _get(key: str, deadline: float, what: str) -> bytes:
    import jax

    left_ms = max(1, int((deadline - time.monotonic()) * 1000))
    try:
        return _client().blocking_key_value_get_bytes(key, left_ms)
    except jax.errors.JaxRuntimeError as e:  # DEADLINE_EXCEEDED, or the coordinator is gone
        raise PeerError(f"{what} within {WAIT_S:g} s ({one_line(e)[:120]})") from None


def _encode(events: pd.DataFrame, info: dict) -> bytes:
    buf = io.BytesIO()
    events.to_parquet(buf, index=False)
    return json.dumps(info).encode() + b"\n" + buf.getvalue()


def _decode(data: bytes) -> tuple[dict, pd.DataFrame]:
    head, _, body = data.partition(b"\n")  # _encode's JSON line, then the parquet bytes
    return json.loads(head), pd.read_parquet(io.BytesIO(body))


def gather_events(events: pd.DataFrame | None, cluster: Cluster, tag: str, *,
                  error: str | None = None) -> tuple[pd.DataFrame, list[dict]] | None:
    """Send this process's EVENTS (or the ``error`` that stopped it) to process 0.

    Process 0 gets every process's events with a ``schema.HOST`` column, and one record per
    process (host name, devices); the others get None. A missing or failed peer raises
    ``PeerError`` on process 0.
    """
    import jax

    me, client = cluster.process_index, _client()
    info = {"process": me, "host": platform.node(),
            "devices": sorted(int(d.id) for d in jax.local_devices())}
    if me != 0:
        status = f"error {error}"
        if error is None:
            data = _encode(events, info)
            chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
            for j, chunk in enumerate(chunks):
                client.key_value_set_bytes(f"{tag}/p{me}/{j}", chunk)
            status = f"ok {len(chunks)}"
        client.key_value_set_bytes(f"{tag}/p{me}/status", status.encode())
        return None
    parts, infos = [events], [info]
    deadline = time.monotonic() + WAIT_S
    for p in range(1, cluster.process_count):
        what = f"process {p} sent no per-op table"
        kind, _, rest = _get(f"{tag}/p{p}/status", deadline, what).decode().partition(" ")
        if kind != "ok":
            raise PeerError(f"process {p} failed: {rest}")
        data = b"".join(_get(f"{tag}/p{p}/{j}", deadline, what) for j in range(int(rest)))
        info_p, df = _decode(data)
        parts.append(df)
        infos.append(info_p)
    return hosts.merged_events(parts), infos


def post_outcome(tag: str, outcome: str, *, wait: bool = True) -> None:
    """Process 0: "ok <run path>" or "error <message>"; with ``wait``, until every process has
    read it (this process hosts the key-value store: leaving earlier would take it away)."""
    import jax

    _client().key_value_set_bytes(f"{tag}/outcome", outcome.encode())
    if wait:
        try:
            _client().wait_at_barrier(f"{tag}/outcome-read", BARRIER_MS)
        except jax.errors.JaxRuntimeError as e:
            log.warning("not every process read the outcome: %s", one_line(e))


def await_outcome(tag: str) -> Path:
    """Other processes: the run process 0 stored, or HarnessError with why it did not."""
    what = "process 0 posted no outcome"
    kind, _, rest = _get(f"{tag}/outcome", time.monotonic() + WAIT_S, what).decode().partition(" ")
    _client().wait_at_barrier(f"{tag}/outcome-read", BARRIER_MS)
    if kind != "ok":
        raise HarnessError(f"process 0 stored no run: {rest}")
    return Path(rest)


# --- the run ------------------------------------------------------------------------------------
def run_workload(name: str, *, cluster: Cluster, preset: str = "tiny",
                 overrides: dict | None = None, mesh: str | None = None, steps: int = STEPS,
                 warmup: int = 2, out: Path = Path("results"), chip=None, plots: bool = True):
    """``harness.runs.workload.run_workload`` across the job: every process builds the workload
    on the global mesh and captures its own devices. Process 0 returns ``(run, run path)``, the
    others ``(None, run path)`` once process 0 has stored the run (``plots``: with its PNGs)."""
    if chip is not None:  # a bad chip name fails on every process before anything compiles
        chip = hardware.chip_entry(chip)
    tag = f"{KEY_PREFIX}/{next(_rounds)}"
    built = build_workload(name, preset, overrides, mesh)
    scratch = Path(tempfile.mkdtemp(prefix=f"harness-p{cluster.process_index}-"))
    try:
        log.info("process %d: running %s on mesh %s", cluster.process_index, name,
                 dict(built.mesh.shape))
        cap = capture(built.fn, built.args, warmup=warmup, steps=steps,
                      out_dir=scratch / "trace", mesh=built.mesh, carry=built.workload.carry)
        if cluster.process_index != 0:
            try:
                events = load_events(cap.trace_dir)
            except HarnessError as e:
                gather_events(None, cluster, tag, error=f"{e}")
                raise
            gather_events(events, cluster, tag)
            return None, await_outcome(tag)
        try:
            merged, processes = gather_events(load_events(cap.trace_dir), cluster, tag)
            meta = built.run_meta(preset, overrides)
            run, path = store_merged(built, cap, merged, processes, chip=chip, meta=meta,
                                     out=Path(out), plots=plots)
        except BaseException as e:  # the others wait for the outcome, unless one is gone
            post_outcome(tag, f"error {one_line(e)}", wait=not isinstance(e, PeerError))
            raise
        post_outcome(tag, f"ok {path}")
        return run, path
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
