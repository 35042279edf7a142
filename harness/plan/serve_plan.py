"""``harness plan llama_decode``: the serving layouts ranked by the book's arithmetic, the
latency-throughput frontier beside them, and (asked with ``--compile N``) the N best compiled
ahead of time.

The arithmetic (``predictions.serving_layouts``, ``predictions.serving``; inference.md §7.3-7.4,
applied-inference.md) prices every layout of the weights (model-parallel over Y, replicated
over X) and of the KV cache (over heads, the book's batch-sharded cache, a sequence-sharded one
for long contexts) on the slice; only the layouts ranked first are compiled, and only when
asked: a real-size decode compile on XLA:CPU takes minutes on a shared host. A KV layout the
workload cannot build yet (``SERVE_PARALLELISM``) is said so, not compiled.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import schema
from harness.errors import HarnessError
from predictions import serving, serving_layouts
from predictions.hardware import Chip

PLANNED = ("llama_decode",)
# KV layout -> the llama workloads' parallelism that builds it (the cache as sharding.py lays it)
SERVE_PARALLELISM = {"heads": "dp_tp", "batch": "dp_tp_kv_batch", "sequence": "dp_tp_kv_seq"}


@dataclass
class ServePlan:
    """The ranked layouts (``schema.SERVE_PLAN``), the frontier (``schema.FRONTIER``), the
    header line and notes."""

    table: pd.DataFrame
    frontier: pd.DataFrame
    header: str
    notes: list[str] = field(default_factory=list)


def _precision(cfg) -> serving.Precision:
    """The workload's weights and cache as a precision: a named one where it matches."""
    wb = 1 if cfg.int8_weights else 2
    kb = 1 if cfg.int8_kv else 2
    same = [p for p in serving.PRECISIONS.values() if (p.weight_bytes, p.kv_bytes) == (wb, kb)]
    return same[0] if same else serving.Precision(f"w{wb}B/kv{kb}B", wb, kb)


def _row(p: serving_layouts.LayoutPrice) -> dict:
    return {schema.KV_LAYOUT: p.kv_layout, schema.MESH: p.mesh,
            schema.WEIGHTS_BYTES: p.weights_bytes, schema.KV_CACHE_BYTES: p.kv_bytes,
            schema.FITS: "yes" if p.fits else "no", schema.B_MAX: p.B_max, schema.KV_S: p.kv_s,
            schema.KV_COMM_S: p.kv_comm_s, schema.PARAMS_S: p.params_s,
            schema.FLOPS_S: p.flops_s, schema.ICI_S: p.ici_s, schema.SERVE_STEP_S: p.step_s,
            schema.TOKENS_PER_S_PER_CHIP: p.tokens_per_s_per_chip, schema.COMPILED: "no"}


def frontier_frame(points: list[serving.Point]) -> pd.DataFrame:
    return pd.DataFrame([{schema.PRECISION: p.precision, schema.NUM_CHIPS: p.N,
                          schema.BATCH: p.B, schema.KV_S: p.kv_s, schema.PARAMS_S: p.params_s,
                          schema.FLOPS_S: p.flops_s, schema.ICI_S: p.ici_s,
                          schema.SERVE_STEP_S: p.step_s, schema.SERVE_BOUND: p.bound,
                          schema.TOKENS_PER_S_PER_CHIP: p.tokens_per_s_per_chip,
                          schema.QPS_PER_CHIP: p.qps_per_chip, schema.TTFT_S: p.ttft_s,
                          schema.USD_PER_MTOK: p.usd_per_million_tokens} for p in points],
                        columns=list(schema.FRONTIER))


def compile_layout(workload: str, preset: str, overrides: dict, row: dict, chip: Chip,
                   tpu_chip: str | None, cache_dir: Path | None, progress) -> dict:
    """Compile one ranked layout ahead of time and price its HLO (``predict_module``): its
    predicted step and peak memory, or why it was not compiled."""
    from harness.capture.memory import memory_fit
    from harness.hlo import parse_module
    from harness.plan.predict import predict_module
    from workloads.aot import start_compile
    from workloads.base import WorkloadError
    from workloads.llama.sharding import PARALLELISMS

    name = SERVE_PARALLELISM[row[schema.KV_LAYOUT]]
    if name not in PARALLELISMS:
        return {schema.COMPILED: f"cannot be: the workload has no {name} layout yet"}
    progress(f"{row[schema.KV_LAYOUT]} on {row[schema.MESH]}: compiling ...")
    t0 = time.perf_counter()
    try:
        aot = start_compile(workload, preset, {**overrides, "parallelism": name},
                            row[schema.MESH], tpu_chip=tpu_chip, cache_dir=cache_dir).result()
    except WorkloadError as e:
        return {schema.COMPILED: f"failed: {e}"}
    progress(f"{row[schema.KV_LAYOUT]} on {row[schema.MESH]}: done in "
             f"{time.perf_counter() - t0:.0f} s")
    pred = predict_module(parse_module(aot.hlo_text), chip, devices=aot.devices)
    out = {schema.COMPILED: "yes", schema.PREDICTED_STEP_S: pred.step.step_s}
    if aot.memory:
        fit = memory_fit(aot.memory, chip, placed=aot.topology is not None)
        out[schema.PEAK_BYTES] = fit["peak_bytes"]
    return out


def plan_serving(workload: str, preset: str, overrides: dict, chip: Chip,
                 topology: tuple[int, ...], batch: str | None, seq: int | None,
                 compile_top: int = 0, tpu_chip: str | None = None,
                 cache_dir: Path | None = None,
                 progress: Callable[[str], None] = lambda line: None) -> ServePlan:
    """The serving layouts of ``workload`` on the slice ``topology`` at batch ``batch``
    (sequences: "32seq" or 32; None the preset's) with ``seq`` cached tokens each (None the
    preset's S), ranked by the book's step; the ``compile_top`` first compiled."""
    import workloads
    from workloads.llama.config import book_model

    if workload not in PLANNED:
        raise HarnessError(f"workload {workload!r} has no serving layouts; valid: "
                           f"{', '.join(PLANNED)}")
    if batch is not None:
        text = batch.strip().lower().removesuffix("seq")
        if not text.isdigit() or int(text) < 1:
            raise HarnessError(f"--batch {batch!r}: give sequences (32 or 32seq): a decode "
                               f"step's tokens are its sequences")
        overrides = {**overrides, "B": text}
    if seq is not None:
        overrides = {**overrides, "S": str(seq)}
    cfg = workloads.make_config(workload, preset, overrides)
    model, prec, N = book_model(cfg), _precision(cfg), math.prod(topology)
    priced = serving_layouts.ranked(model, chip, N, cfg.B, cfg.S, prec, "bf16")
    if not priced:
        raise HarnessError(f"no layout splits B={cfg.B} over {N} chips; valid: B a multiple "
                           f"of a power of two dividing {N}")
    rows = [_row(p) for p in priced]
    for row in [r for r in rows if r[schema.FITS] == "yes"][:compile_top]:
        row.update(compile_layout(workload, preset, overrides, row, chip, tpu_chip, cache_dir,
                                  progress))
    p, g = cfg.T, max(1, cfg.S - cfg.T)  # the prompt of T tokens, generating the rest of S
    points = [pt for name in serving.PRECISIONS
              for pt in serving.frontier(model, chip, N, p, g, name, cfg.S)]
    header = (f"{workload} ({preset}) serving on {chip.name} {'x'.join(map(str, topology))} "
              f"({N} chips): B = {cfg.B} sequences of S = {cfg.S} cached tokens, weights and "
              f"KV {prec.name}; ranked by the book's step (inference.md)")
    notes = [f"frontier: prompt {p} tokens, {g} generated, over batch up to the largest that "
             f"fits, for bf16, int8 and int4 (applied-inference.md)"]
    if not compile_top:
        notes.append("no layout compiled (--compile N compiles the N best that fit)")
    if cfg.S < serving_layouts.LONG_CONTEXT:
        notes.append(f"S={cfg.S} < {serving_layouts.LONG_CONTEXT}: the sequence-sharded cache "
                     f"is not tried")
    table = pd.DataFrame(rows).reindex(columns=list(schema.SERVE_PLAN))
    return ServePlan(table, frontier_frame(points), header, notes)


def serve_plan_json(sp: ServePlan) -> dict:
    import json

    def records(df):
        return json.loads(df.to_json(orient="records"))

    return {"header": sp.header, "notes": sp.notes, "layouts": records(sp.table),
            "frontier": records(sp.frontier)}
