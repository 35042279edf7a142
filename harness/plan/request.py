"""What ``harness plan`` is asked, made into a ``Setting`` and ranked: the slice (its physical
axes as libtpu names them), the global batch (tokens or sequences) and where to compile.

    plan_layouts("llama_train", "70b", {}, chip_entry("tpu-v5p"), (4, 4, 4), "256seq", 4096,
                 planned(), "auto", aot_cache_dir())   # predictions.layouts.planned
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError
from harness.plan import experts
from harness.plan.compiles import CPU, NONE, compile_keys
from harness.plan.layouts import candidates, staged
from harness.plan.pipeline import PINNED, plan_candidates
from harness.plan.rank import Plan, Setting, orders_agree, plan
from predictions import roofline
from predictions.hardware import Chip
from predictions.mesh import MeshError, parse_dims
from predictions.network import System
from predictions.topology import check_axes

SEQ = "seq"  # --batch 256seq: sequences, not tokens
LONG_CONTEXT = 16384  # tokens per sequence beyond which sequence sharding would be worth trying


@dataclass
class LayoutPlan:
    """The ranked layouts (``plan``) and what is said above them: the header line (workload,
    slice, compiler, batch, alpha), notes, alpha = C/W_ici and whether the two orders agree."""

    plan: Plan
    header: str
    tokens: int
    alpha: float
    agree: bool
    notes: list[str] = field(default_factory=list)


def slice_topology(chip, text: str | None) -> tuple[int, ...]:
    """The slice's physical axes: as given (a TPU slice must be the one libtpu names for its
    chip count, ``workloads.tpu.topology_dims``), by default 64 chips."""
    from workloads import tpu

    kind = tpu.TOPOLOGIES.get(chip.name)
    if text is None:
        return tpu.topology_dims(64, kind.ndim) if kind else (8,)
    try:
        dims = parse_dims(text)
    except MeshError as e:
        raise HarnessError(f"--topology {text!r}: {e.reason}") from None
    if kind is None:
        return (math.prod(dims),)
    named = tpu.check_slice(chip.name, dims)  # WorkloadError: a slice libtpu cannot build
    if sorted(dims) != sorted(d for d in named if d > 1 or len(dims) == kind.ndim):
        raise HarnessError(f"--topology {text}: libtpu slices {math.prod(dims)} {chip.name} "
                           f"chips as {'x'.join(map(str, named))}; valid: that shape")
    check_axes(chip, dims)  # ValueError naming the chip's largest slice
    return named


def job_topology(chip: Chip, topology: tuple[int, ...], given: bool, decl
                 ) -> tuple[tuple[int, ...], System | None]:
    """(the job's physical axes, its network) for the declared network ``decl``
    (``harness.chip.network.Declared``): a GPU job of ``--nodes`` x GPUs per node (as many
    chips as ``--topology``, when given), a TPU job of ``--slices`` slices of ``topology``
    (the slices its outermost axis, DCN); the topology as it is and None when none."""
    from harness.chip.network import named, resolve

    if decl is None or not decl.given:
        return topology, None
    if chip.kind == "tpu":
        full = ((decl.slices,) if (decl.slices or 1) > 1 else ()) + tuple(topology)
        return full, resolve(decl, chip, math.prod(full))
    if decl.nodes is not None:
        per = decl.gpus_per_node or named(decl, chip).domain
        if given and math.prod(topology) != decl.nodes * per:
            raise HarnessError(f"--topology {math.prod(topology)} chips, but --nodes "
                               f"{decl.nodes} x {per} GPUs per node = {decl.nodes * per}")
        topology = (decl.nodes * per,)
    return topology, resolve(decl, chip, math.prod(topology))


def batch_overrides(batch: str | None, seq: int | None, preset_B: int, preset_T: int) -> dict:
    """``--batch``/``--seq-len`` as the config's B (sequences) and T (tokens each)."""
    T = seq or preset_T
    if T < 1:
        raise HarnessError(f"--seq-len must be a positive number of tokens, got {T}")
    if batch is None:
        return {"B": str(preset_B), "T": str(T)}
    text = batch.strip().lower()
    try:
        n = int(text[:-len(SEQ)] if text.endswith(SEQ) else text)
    except ValueError:
        raise HarnessError(f"--batch {batch!r}: give tokens (1048576) or sequences "
                           f"(256{SEQ})") from None
    if n < 1:
        raise HarnessError(f"--batch must be positive, got {batch}")
    if text.endswith(SEQ):
        return {"B": str(n), "T": str(T)}
    if n % T:
        raise HarnessError(f"--batch {n} tokens is not a whole number of {T}-token sequences; "
                           f"valid: a multiple of {T}, or --batch N{SEQ}")
    return {"B": str(n // T), "T": str(T)}


def plan_layouts(workload: str, preset: str, overrides: dict, chip: Chip,
                 topology: tuple[int, ...], batch: str | None, seq: int | None,
                 layouts: Sequence[str], compiler: str, cache_dir: Path | None,
                 progress: Callable[[str], None] = lambda line: None,
                 system: System | None = None) -> LayoutPlan:
    """``layouts`` of ``workload`` on ``chip``'s slice ``topology`` at the global batch
    ``batch`` (tokens, or sequences ``"256seq"``; None: the preset's) of ``seq`` tokens each,
    compiled by ``compiler`` (``harness.plan.compiles``) and ranked (``harness.plan.rank``);
    on ``system`` (several nodes or slices, ``job_topology``) collectives are priced at the
    network levels they cross. Several TPU slices compile on XLA:CPU over all their chips."""
    import workloads  # deferred: importing workloads imports jax
    from workloads import tpu

    # --set stages/microbatches/schedule/repeats pin the pipeline search, set per candidate
    pinned = {k: overrides[k] for k in PINNED if k in overrides}
    overrides = {k: v for k, v in overrides.items() if k not in PINNED}
    given = workloads.make_config(workload, preset, overrides)
    overrides = {**overrides, **batch_overrides(batch, seq, given.B, given.T)}
    cfg = workloads.make_config(workload, preset, overrides)
    compiled = compiler != NONE
    keys, notes = (compile_keys([chip.name], compiler, tpu.libtpu_available()) if compiled
                   else ({chip.name: NONE}, []))
    tpu_chip = None if keys[chip.name] in (CPU, NONE) else chip.name
    if tpu_chip and system is not None and system.levels[-1].kind == "dcn" and \
            math.prod(topology) > system.domain:
        tpu_chip = None  # libtpu compiles one slice per program (DCN as megascale transfers)
        notes.append(f"{math.prod(topology) // system.domain} slices: compiled on XLA:CPU over "
                     f"all {math.prod(topology)} chips, collectives priced at ICI and DCN")
    if system is not None:
        from harness.chip.network import describe
        notes.append(describe(system))
    tokens = cfg.B * cfg.T
    if cfg.T >= LONG_CONTEXT:
        notes.append(f"T={cfg.T}: {workload} has no sequence-sharded layout, so none is tried")
    setting = Setting(workload, preset, overrides, chip, topology, tpu_chip, cache_dir, system)
    if getattr(cfg, "E", 0):  # a MoE config: every layout searched as an expert layout
        flat, searched = experts.plan_candidates(cfg, chip, topology, system,
                                                 experts.names(layouts), compiled, preset)
        piped = []
    else:
        experts.check_dense(layouts)
        flat = [c if compiled else dataclasses.replace(c, compile=False)
                for c in candidates(layouts, cfg.F, tokens, topology)]
        piped, searched = plan_candidates(workload, cfg, chip, topology, system,
                                          [n for n in layouts if staged(n)], pinned, compiled,
                                          alone=all(staged(n) for n in layouts))
    notes += [searched] if searched else []
    result = plan(setting, flat + piped, progress)
    alpha = roofline.critical_intensity(chip, "bf16", "ici")
    how = ("nothing compiled (the book's arithmetic)" if not compiled
           else f"{'XLA:TPU' if tpu_chip else 'XLA:CPU'} compiles")
    header = (f"{workload} ({preset}) on {chip.name} {'x'.join(map(str, topology))} "
              f"({math.prod(topology)} chips), {how}; "
              f"B = {tokens:,} tokens ({cfg.B} x {cfg.T}); alpha = C/W_ici = {alpha:,.0f}")
    agree = orders_agree(result.book_order, result.predicted_order)
    return LayoutPlan(result, header, tokens, alpha, agree, notes)
