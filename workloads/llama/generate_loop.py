"""The request loop of ``llama_generate``: a seeded stream of requests served through B slots by
continuous batching (`inference.md` §7.3: a slot is refilled as soon as its sequence ends),
prefill, insert and generate driven from Python as JetStream drives them, with the shared
prompt prefix prefilled once and reused (prefix caching).

Measured: time to first token (arrival to the first token on the host), time per output token
(a request's later tokens, (t_last - t_first) / (g - 1)), tokens/s over the stream's wall time,
the slots' occupancy over generate steps, prefix-cache hits. Predicted beside them, for the
chip the loop ran on: the book's decode step at B slots over S cached tokens (the per-token
latency, ``predictions.serving.step_terms``), its tokens/s with every slot busy, B / T_step, and
the prompt's prefill (``predictions.serving.ttft``).
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from predictions import layouts, serving
from predictions.step import book_dtype
from workloads.llama.config import book_model

PREFILL, INSERT, GENERATE = "prefill", "insert", "generate"  # the programs, by their function
PROGRAMS = (PREFILL, INSERT, GENERATE)


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (s after the stream starts), its prompt after the prefix,
    whether it starts with the shared prefix, and the tokens it generates (g)."""

    arrival_s: float
    prompt: np.ndarray
    shared: bool
    g: int


def requests(cfg) -> tuple[np.ndarray, list[Request]]:
    """The shared prefix's tokens and R requests drawn from ``cfg.seed``: Poisson arrivals at
    ``rate``/s (all at 0 for rate 0), prompt and generation lengths uniform in their ranges."""
    rng = np.random.default_rng(cfg.seed + 2)
    R = cfg.R
    gaps = rng.exponential(1.0 / cfg.rate, R) if cfg.rate > 0 else np.zeros(R)
    arrivals = np.cumsum(gaps) - gaps[0]
    p = rng.integers(cfg.p_min, cfg.p_max + 1, R)
    g = rng.integers(cfg.g_min, cfg.g_max + 1, R)
    shared = (rng.random(R) < cfg.shared) & (cfg.prefix > 0)
    prefix = rng.integers(0, cfg.V, cfg.prefix, dtype=np.int32)
    return prefix, [Request(float(arrivals[i]), rng.integers(0, cfg.V, p[i], dtype=np.int32),
                            bool(shared[i]), int(g[i])) for i in range(R)]


@dataclass
class Served:
    """One request's tokens out and times (s after the stream started)."""

    arrival_s: float
    first_s: float
    last_s: float
    tokens: list[int] = field(default_factory=list)


@dataclass
class Stream:
    """What the loop did: each request's record (in request order), the active slots at each
    generate step, the prefix-cache hits, the wall time and the calls of each program
    (``PROGRAMS``' names)."""

    served: list[Served]
    occupancy: list[int]
    prefix_hits: int
    wall_s: float
    calls: dict[str, int] = field(default_factory=dict)


def _pad(tokens: np.ndarray, T: int) -> np.ndarray:
    out = np.zeros((1, T), np.int32)
    out[0, :len(tokens)] = tokens
    return out


def prefill_prefix(cfg, progs, prefix: np.ndarray):
    """The shared prefix's one-sequence cache, prefilled in chunks of the bucket T."""
    cache = progs.empty1
    for start in range(0, len(prefix), cfg.T):
        chunk = prefix[start:start + cfg.T]
        _, cache = progs.prefill(progs.params, cache, _pad(chunk, cfg.T), np.int32(start),
                                 np.int32(len(chunk)))
    return cache


@dataclass
class Slots:
    """The B slots a stream starts from: their cache (a copy of the programs': generate
    donates it, so that the programs serve another stream after), tokens and positions."""

    cache_B: dict
    tokens_B: np.ndarray
    pos_B: np.ndarray


def warm_up(cfg, progs) -> Slots:
    """Compile the three programs (one call each) before a stream is served, so that a stream
    runs no compilation; the slots' contents do not matter (insert overwrites a slot whole
    before it is used)."""
    B = cfg.B
    tokens_B, pos_B = np.zeros((B, 1), np.int32), np.zeros((B,), np.int32)
    cache_B = jax.tree.map(jnp.copy, progs.cache_B)
    first, _ = progs.prefill(progs.params, progs.empty1, _pad(np.zeros(1, np.int32), cfg.T),
                             np.int32(0), np.int32(1))
    cache_B = progs.insert(cache_B, progs.empty1, np.int32(0))
    out, cache_B = progs.generate(progs.params, cache_B, tokens_B, pos_B)
    np.asarray(out), int(first)
    return Slots(cache_B, tokens_B, pos_B)


def run_stream(cfg, progs, prefix: np.ndarray, reqs: list[Request]) -> Stream:
    """Serve ``reqs`` through ``cfg.B`` slots (module docstring), the programs warmed first."""
    return serve(cfg, progs, prefix, reqs, warm_up(cfg, progs))


def serve(cfg, progs, prefix: np.ndarray, reqs: list[Request], slots: Slots) -> Stream:
    """Serve ``reqs`` through ``cfg.B`` slots from ``slots`` (``warm_up``'s); greedy tokens.
    Its program calls: ceil(prefix / T) prefills of the prefix, then one prefill a request,
    one insert a request of two tokens or more, one generate a step."""
    B, cache_B, tokens_B, pos_B = cfg.B, slots.cache_B, slots.tokens_B, slots.pos_B
    prefix_cache = prefill_prefix(cfg, progs, prefix) if len(prefix) else None
    served = [Served(r.arrival_s, math.nan, math.nan) for r in reqs]
    queue = deque(sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_s))
    free, active, occupancy = list(range(B)), {}, []
    calls = {PREFILL: -(-len(prefix) // cfg.T), INSERT: 0, GENERATE: 0}
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0  # noqa: E731
    while queue or active:
        while free and queue and reqs[queue[0]].arrival_s <= clock():
            i, slot = queue.popleft(), free.pop(0)
            r, rec = reqs[i], served[i]
            start = len(prefix) if r.shared else 0
            first, cache1 = progs.prefill(progs.params, prefix_cache if r.shared else
                                          progs.empty1, _pad(r.prompt, cfg.T),
                                          np.int32(start), np.int32(len(r.prompt)))
            calls[PREFILL] += 1
            rec.tokens.append(int(first))
            rec.first_s = rec.last_s = clock()
            if r.g == 1:
                free.append(slot)
                continue
            cache_B = progs.insert(cache_B, cache1, np.int32(slot))
            calls[INSERT] += 1
            tokens_B[slot, 0], pos_B[slot] = rec.tokens[-1], start + len(r.prompt)
            active[slot] = i
        if not active:
            if queue:
                time.sleep(max(0.0, reqs[queue[0]].arrival_s - clock()))
            continue
        out, cache_B = progs.generate(progs.params, cache_B, tokens_B, pos_B)
        calls[GENERATE] += 1
        out = np.asarray(out)
        now = clock()
        occupancy.append(len(active))
        for slot, i in list(active.items()):
            rec = served[i]
            rec.tokens.append(int(out[slot, 0]))
            rec.last_s = now
            tokens_B[slot, 0], pos_B[slot] = out[slot, 0], pos_B[slot] + 1
            if len(rec.tokens) == reqs[i].g:
                del active[slot]
                free.append(slot)
    return Stream(served, occupancy, sum(r.shared for r in reqs), clock(), calls)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def measured(cfg, stream: Stream) -> dict:
    """The stream's figures (module docstring); TPOT over requests of two tokens or more."""
    ttft = [s.first_s - s.arrival_s for s in stream.served]
    tpot = [(s.last_s - s.first_s) / (len(s.tokens) - 1) for s in stream.served
            if len(s.tokens) > 1]
    occ = [n / cfg.B for n in stream.occupancy]
    tokens = sum(len(s.tokens) for s in stream.served)
    return {"ttft_median_s": _pct(ttft, 50), "ttft_p90_s": _pct(ttft, 90),
            "tpot_median_s": _pct(tpot, 50), "tpot_p90_s": _pct(tpot, 90),
            "tokens_per_s": tokens / stream.wall_s if stream.wall_s > 0 else math.nan,
            "occupancy_mean": float(np.mean(occ)) if occ else math.nan,
            "occupancy_min": min(occ, default=math.nan),
            "occupancy_max": max(occ, default=math.nan)}


def predicted(cfg, mesh, chip) -> dict:
    """The book's figures on ``chip`` for the programs that ran (module docstring): N devices,
    Y model-parallel (``dp_tp``'s split of the mesh), weights and KV at their bytes."""
    model = book_model(cfg)
    shape = dict(mesh.shape) if mesh is not None else {"X": 1, "Y": 1}
    N = math.prod(shape.values())
    Y = layouts.degrees(layouts.layout("dp_tp"), shape)[1]
    prec = serving.Precision("run", 1 if cfg.int8_weights else 2, 1 if cfg.int8_kv else 2)
    dtype = book_dtype(cfg.dtype)
    # inference.md §7.3: a step reads every slot's S cached tokens, whatever its position
    step = serving.step_terms(model, chip, N, cfg.B, cfg.S, prec, Y=Y, dtype=dtype)["step"]
    return {"chip": getattr(chip, "name", str(chip)),
            "ttft_s": serving.ttft(model, chip, N, cfg.T, prec, dtype=dtype),
            "tpot_s": step, "tokens_per_s": cfg.B / step}


def figures(cfg, mesh, chip, stream: Stream) -> dict:
    """The loop's record: counts, each program's calls, measured figures, the prediction on
    ``chip`` (None: none), notes. Plain JSON-able data (a run keeps it in its meta)."""
    return {"requests": len(stream.served), "slots": cfg.B,
            "tokens_out": sum(len(s.tokens) for s in stream.served),
            "prefix_hits": stream.prefix_hits, "generate_steps": len(stream.occupancy),
            "calls": dict(stream.calls), "wall_s": stream.wall_s,
            "measured": measured(cfg, stream),
            "predicted": predicted(cfg, mesh, chip) if chip is not None else {},
            "notes": ["TTFT measured from arrival (queueing included); predicted: the prefill "
                      f"of a T={cfg.T} bucket at the book's 50% MFU (inference.md)"]}
