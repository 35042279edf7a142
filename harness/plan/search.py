"""``predict-hlo`` with no ``remat`` given: the cheapest setting of the memory knobs that fits.

A workload lists the settings its fit search may compile (``Workload.fit_trials``;
``llama_train``: ``workloads.llama.fit`` and ``fit_more``): its remat and offload policies, the
ZeRO stages, microbatches and a smaller batch, each with the loss in as few chunks as its
memory model needs, the bytes a device it gives them in HBM and in host memory, the FLOPs a
device of the step, recomputation included, and its weights' and gradients' collectives. The
search prunes every setting the model puts past the chip's HBM (or the host memory libtpu gives
a chip) before compiling, then compiles the rest it can build for the TPU chip cheapest first by
predicted step time (``predicted_s``: `roofline.md`'s max(T_math, T_comms), the FLOPs at the
chip's peak against the offloaded bytes to host and back over PCIe and the collectives over
ICI, which overlap the compute; `transformers.md`, reference §5.2: remat trades FLOPs for
activation memory; `training.md`: ZeRO-3 and microbatches trade ICI bytes for it) until
libtpu places one (a setting it cannot build, ``FitTrial.compilable`` False, is ranked and
never compiled): libtpu
refuses a program whose temporaries exceed the HBM early in the compile
(``workloads.aot.HbmExhausted``) and says by how much, and a refused setting is tried at once
with the loss in as many more chunks as the model needs to save that much. The one that fits is
used (its compile is cached, so ``predict-hlo`` reads it back) and a note names the knobs set,
their predicted step time, the settings pruned and the compiles made, with their time.

Beside the pick, ``search`` returns the ranking (issue 56 part 3, "the cheapest way to fit"):
every setting the workload offers, those the memory model keeps first, cheapest first by
``predicted_s``, each with its bytes in HBM and host memory, the bytes its collectives move, the
FLOPs it adds over the setting that does the fewest, the model's verdict, for those compiled
libtpu's (``modelled only`` for one never compiled), for those placed their compiled
schedule's simulated step (``fit_compile.simulated_s``), and its note. ``compiles``
(``predict-hlo --compile K``, default 1) compiles until K settings are placed (the pick: the
one of them whose schedule simulates shortest, since the model's max(T_math, T_ici) hides
the collectives a microbatched schedule leaves exposed) or every kept one is tried; 0
compiles none and ranks by the model alone.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.plan.fit_compile import Compiles, compile_one, host_budget, retry
from harness.units import fmt_bytes, fmt_decimal_bytes, fmt_seconds
from predictions import collectives, hardware

REMAT = "remat"


def wanted(workload, overrides: Mapping[str, str], tpu_chip: str | None) -> bool:
    """Search only when no remat was given, the workload has knobs to set, and libtpu judges
    fit."""
    return bool(tpu_chip) and REMAT not in overrides and workload.fit_trials is not None


def knobs(sets: Mapping[str, str]) -> str:
    """``{"num_vocab_tiling": "4", "remat": "full"}`` -> ``"num_vocab_tiling=4, remat=full"``."""
    return ", ".join(f"{k}={v}" for k, v in sets.items())


def ici_s(trial, tpu_chip: str) -> float:
    """T_ici: the seconds of ``trial``'s collectives (its weights' and gradients'), each
    ``predictions.collectives.estimate``'s on the chip's ICI (`sharding.md`) times its count
    (0 where the mesh's axes do not fit one slice: not priced)."""
    try:
        return sum(c.count * collectives.estimate(c.kind, c.nbytes, c.axes, tpu_chip).seconds
                   for c in trial.collectives)
    except ValueError:
        return 0.0


def ici_bytes(trial) -> float:
    """Bytes ``trial``'s collectives move a device a step, the book's count (`training.md`:
    an all-reduce twice its array, dp's gradients 2x the weights, FSDP's gathers and
    reduce-scatter 3x)."""
    return sum(c.count * c.nbytes * (2 if c.kind == "all-reduce" else 1)
               for c in trial.collectives)


def predicted_s(trial, tpu_chip: str) -> float:
    """The time the search orders ``trial`` by: T = max(T_math, T_host, T_ici) (`roofline.md`'s
    lower bound, perfect overlap: offloaded activations move over the host link while the
    layers compute, which is why MaxText offloads, and FSDP gathers the next layer's weights
    during this one's, `training.md`), T_math = its FLOPs a device over the chip's bf16 peak,
    T_host = its offloaded bytes to host in the forward and back in the backward, 2 · host
    bytes / W_pcie (not priced where the book gives no PCIe rate), T_ici = ``ici_s``; times
    ``trial.steps``, the steps that carry the batch asked for (a smaller batch's)."""
    chip = hardware.chip_entry(tpu_chip)
    host = 2 * trial.host_bytes / chip.pcie_bytes_per_s if chip.pcie_bytes_per_s else 0.0
    step = max(trial.flops / chip.flops_per_s("bf16"), host, ici_s(trial, tpu_chip))
    return trial.steps * step


def ordered(trials: list, tpu_chip: str) -> list:
    """``trials`` cheapest first by ``predicted_s``; a tie goes to the batch asked for (the
    fewer ``steps``), then to the fewer HBM bytes (more headroom, likelier placed at the first
    compile), then to the workload's order."""
    return sorted(trials, key=lambda t: _order_key(t, tpu_chip))


def _order_key(t, tpu_chip: str) -> tuple:
    return predicted_s(t, tpu_chip), t.steps, t.need_bytes


def prune(name: str, trials: list, budget: float, host: float | None) -> tuple[list, str]:
    """``(the trials the memory model puts within the HBM budget and the host memory libtpu
    gives a chip (None: not known), what it pruned, in words)``."""
    from workloads.base import OFFLOAD_STAGE

    in_hbm = [t for t in trials if t.need_bytes <= budget]
    kept = [t for t in in_hbm if host is None or t.host_bytes <= host]
    words = (f"the memory model put {len(trials) - len(in_hbm)} of {len(trials)} settings past "
             f"its {fmt_decimal_bytes(budget)} of HBM"
             + (f" and {len(in_hbm) - len(kept)} past the {fmt_bytes(host)} of host memory "
                f"libtpu gives a chip" if len(kept) < len(in_hbm) else "")
             + " before compiling")
    if not any(t.stage == OFFLOAD_STAGE for t in trials):
        words += f"; {name} has no offload policies"
    return kept, words


# the ranking's columns (``table``): a setting's knobs, its stage, its step time (a smaller
# batch's: its steps that carry the batch asked for), the bytes the memory model gives it a
# device, the bytes its weights' and gradients' collectives move a device a step
# (``ici_bytes``), the FLOPs a device it adds over the setting that does the fewest
# (recomputation, a chunked loss' second output projection), the model's verdict, libtpu's
# for a setting compiled ("" for one not compiled; ``MODELLED`` for one never compiled) and
# what the row says beyond its knobs (``FitTrial.note``)
RANK, SETTING, STAGE, PREDICTED_S = "rank", "setting", "stage", "predicted_s"
SIMULATED_S = "simulated_s"   # a placed setting's schedule (``fit_compile.simulated_s``) x steps
HBM, HOST, ICI, ADDED = "hbm_bytes", "host_bytes", "ici_bytes", "added_flops"
MODEL, LIBTPU, NOTE = "model", "libtpu", "note"
FITS, PAST_HBM, PAST_HOST = "fits", "past HBM", "past host memory"
PLACED, REFUSED, MODELLED = "placed", "refused", "modelled only"


def verdict(trial, budget: float, host: float | None) -> str:
    """The memory model's word on ``trial``: fits, past the HBM, or past the host memory."""
    if trial.need_bytes > budget:
        return PAST_HBM
    return PAST_HOST if host is not None and trial.host_bytes > host else FITS


def table(trials: list, tpu_chip: str, budget: float, host: float | None,
          compiled: Mapping[str, str] | None = None,
          simulated: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Every setting in ``trials``, those the model keeps first, each group cheapest first by
    ``predicted_s`` (``ordered``), ranked 1.. where kept; ``compiled``: libtpu's verdict by
    ``knobs(trial.sets)``, ``simulated``: a placed one's simulated step (per step, the column
    times the trial's steps; NaN where none). Knobs every trial sets alike (the state donated)
    are left out of the setting's words."""
    compiled, simulated = compiled or {}, simulated or {}
    same = {k for k, v in trials[0].sets.items() if all(t.sets.get(k) == v for t in trials)}
    least = min(t.flops * t.steps for t in trials)
    said = [(verdict(t, budget, host), t) for t in ordered(trials, tpu_chip)]
    rows, rank = [], 0
    for model, t in [s for s in said if s[0] == FITS] + [s for s in said if s[0] != FITS]:
        rank += model == FITS
        rows.append({RANK: rank if model == FITS else None,
                     SETTING: knobs({k: v for k, v in t.sets.items() if k not in same}),
                     STAGE: t.stage, PREDICTED_S: predicted_s(t, tpu_chip),
                     SIMULATED_S: t.steps * simulated.get(knobs(t.sets), float("nan")),
                     HBM: t.need_bytes, HOST: t.host_bytes, ICI: ici_bytes(t),
                     ADDED: t.flops * t.steps - least, MODEL: model,
                     LIBTPU: compiled.get(knobs(t.sets), "") if t.compilable else MODELLED,
                     NOTE: t.note})
    return pd.DataFrame(rows)


@dataclass
class Fit:
    """The search's answer: ``sets`` (the overrides with the knobs set), its ``note`` (one
    line) and the ranking (``table``)."""

    sets: dict
    note: str
    table: pd.DataFrame


def choose(workload, preset: str, overrides: Mapping[str, str], mesh_shape: str,
           tpu_chip: str, cache_dir: Path | None,
           progress: Callable[[str], None] = lambda line: None) -> tuple[dict, str]:
    """``(overrides with the knobs set, one line saying which and why)``: ``search`` with one
    setting placed."""
    fit = search(workload, preset, overrides, mesh_shape, tpu_chip, cache_dir, progress)
    return fit.sets, fit.note


def search(workload, preset: str, overrides: Mapping[str, str], mesh_shape: str,
           tpu_chip: str, cache_dir: Path | None,
           progress: Callable[[str], None] = lambda line: None, compiles: int = 1) -> Fit:
    """Of the ``workload.fit_trials`` the memory model keeps, cheapest first by
    ``predicted_s``, compile for ``tpu_chip`` until ``compiles`` are placed (a refused one
    retried with more loss chunks, ``fit_compile.retry``); the pick is the placed one whose
    compiled schedule simulates shortest (``_cheapest_placed``); when none is, the last
    refused (or, none compiled, the one the model gives the fewest bytes), whose compile then
    reports the refusal; ``compiles`` 0: the model's cheapest, nothing compiled. With the
    ranking of every setting, retries included."""
    import workloads
    from workloads.mesh import abstract_mesh

    cfg = workloads.make_config(workload.name, preset, overrides)
    mesh = abstract_mesh(mesh_shape, workload.mesh_axes)
    budget, host = hardware.chip_entry(tpu_chip).hbm_bytes, host_budget(tpu_chip)
    trials = workload.fit_trials(cfg, mesh, budget, overrides)
    kept, pruned = prune(workload.name, trials, budget, host)
    buildable = [t for t in trials if t.compilable] or trials
    log, last, placed, said = Compiles(), min(buildable, key=lambda t: t.need_bytes), [], {}
    for trial in [t for t in ordered(kept, tpu_chip) if t.compilable] if compiles else ():
        need = trial.need_bytes
        while trial is not None and len(placed) < compiles:
            sets = {**overrides, **trial.sets}
            trials += [trial] if trial not in trials else []
            over = compile_one(workload, preset, sets, mesh_shape, tpu_chip, cache_dir, log,
                               progress, knobs(trial.sets))
            said[knobs(trial.sets)] = REFUSED if over is not None else PLACED
            if over is None:
                placed.append(trial)
                break
            log.refused.append(knobs(trial.sets))
            last, nxt = trial, retry(workload, cfg, mesh, overrides, trial, need, over)
            need, trial = (nxt.need_bytes, nxt) if nxt else (need, None)
    ranking = table(trials, tpu_chip, budget, host, said, log.simulated)
    return Fit(*_pick(placed, kept, last, overrides, tpu_chip, pruned, log, compiles), ranking)


def _cheapest_placed(placed: list, tpu_chip: str, simulated: Mapping[str, float]
                     ) -> tuple[object, str]:
    """``(the placed setting to use, the words for how it was judged)``: by its compiled
    schedule's simulated step times its steps (``fit_compile``) where every placed one has
    one, which sees the collectives a schedule leaves exposed that the model's max(T_math,
    T_ici) hides; else the model's order (``ordered``)."""
    def played(t):
        return t.steps * simulated[knobs(t.sets)]
    if len(placed) > 1 and all(knobs(t.sets) in simulated for t in placed):
        best = min(placed, key=lambda t: (played(t), *_order_key(t, tpu_chip)))
        others = ", ".join(fmt_seconds(played(t)) for t in placed if t is not best)
        return best, (f", by its compiled schedule's simulated step ({fmt_seconds(played(best))}"
                      f" against {others})")
    best = ordered(placed, tpu_chip)[0]
    return best, (f" (simulated step {fmt_seconds(played(best))})"
                  if knobs(best.sets) in simulated else "")


def _pick(placed: list, kept: list, last, overrides: Mapping[str, str], tpu_chip: str,
          pruned: str, log: Compiles, compiles: int) -> tuple[dict, str]:
    """``(the overrides with the chosen knobs, the note)`` (``search``)."""
    kept = [t for t in kept if t.compilable]
    if not compiles and kept:
        best = ordered(kept, tpu_chip)[0]
        return ({**overrides, **best.sets},
                f"{knobs(best.sets)} (no remat given): the memory model's cheapest setting "
                f"for {tpu_chip} ({predicted_s(best, tpu_chip):.1f} s), nothing compiled "
                f"(--compile 0); {pruned}")
    if placed:
        best, played = _cheapest_placed(placed, tpu_chip, log.simulated)
        which = ("the first setting that fits" if compiles == 1 else
                 f"the cheapest of the {len(placed)} settings placed in")
        refused = f" ({'; '.join(log.refused)}: refused)" if log.refused else ""
        return ({**overrides, **best.sets},
                f"{knobs(best.sets)} (no remat given): {which} {tpu_chip}'s HBM{played}, "
                f"tried cheapest first by predicted step time ({predicted_s(best, tpu_chip):.1f} "
                f"s, FLOPs at peak, offloads over PCIe, collectives over ICI); {pruned}; "
                f"{log.line()}{refused}")
    return ({**overrides, **last.sets},
            f"no setting fits {tpu_chip}'s HBM: {pruned}; {log.line()}"
            + (f", every one refused ({'; '.join(log.refused)})" if log.refused else ""))
