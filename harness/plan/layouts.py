"""The layouts ``harness plan`` tries, and where each mesh axis lies on the slice.

A layout is an entry of the one registry (``predictions.layouts.LAYOUTS``, which the workloads
turn into partition specs) on a mesh X x Y over the N chips: X the devices over its data and
FSDP axes, Y over its model axes. Each entry sizes its axes (``Layout.sizes``): data and FSDP
put every chip on X, tensor parallelism every chip on Y, FSDP + TP splits them at the book's
optimum (training.md §6.2: X_opt = sqrt((B/F) * (M_X/M_Y) * N), rounded to a power of two).
M_X and M_Y, how many physical torus axes each mesh axis spans, come from laying the mesh onto
the slice (``spans``); they scale the book's conditions (sharding.md: an axis spanning M
physical axes has M times the links).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.errors import HarnessError
from predictions import layouts as registry
from predictions.topology import spans  # noqa: F401 (re-exported: harness.plan.spans)

# the one registry of layouts; plan tries registry.planned() and the pipelines unless told
LAYOUTS = registry.LAYOUTS
# the pipelined layouts harness.plan.pipeline searches (ZeRO-1: weights whole per stage)
PIPELINED = ("pp", "pp+tp", "pp+dp_tp")
# the expert layouts harness.plan.experts searches (a MoE config; pp+dp_ep by the book only)
EXPERT_LAYOUTS = ("ep", "dp_ep", "ep+fsdp", "ep+tp", "ep+fsdp_tp", "pp+dp_ep")


@dataclass(frozen=True)
class Candidate:
    """One layout: the registry's layout on mesh X x Y, and the physical axes each mesh
    axis spans (M_X, M_Y)."""

    layout: str
    X: int
    Y: int
    M_X: int
    M_Y: int
    note: str = ""
    # a pipeline (harness.plan.pipeline): S stages, M microbatches, the schedule, its repeats
    S: int = 1
    microbatches: int = 1
    schedule: str = ""
    repeats: int = 1
    compile: bool = True  # False: priced by the book only
    # an expert layout (harness.plan.experts): its mesh by role, row-major, and the capacity
    # factor (None: dropless)
    roles: tuple[tuple[str, int], ...] = ()
    capacity: float | None = None

    @property
    def shape(self) -> dict[str, int] | None:
        """A pipeline's or an expert layout's mesh by role (the layout's axes); None flat."""
        if self.roles:
            return dict(self.roles)
        if self.S <= 1:
            return None
        size = {"stage": self.S, "data": self.X, "fsdp": self.X, "model": self.Y}
        return {r: size[r] for r in registry.layout(self.layout).axes}

    @property
    def mesh(self) -> str:
        if self.shape is not None:
            return ",".join(f"{r}={n}" for r, n in self.shape.items())
        return f"{self.X}x{self.Y}"


def _llama_model(cfg):
    from workloads.llama.config import book_model
    return book_model(cfg)


# workloads whose config names a parallelism -> their model in the book's letters
PLANNABLE: dict[str, Callable] = {"llama_train": _llama_model}


def n_ckpt(cfg) -> float:
    """Width-D checkpoints a layer keeps per token under the config's remat policy
    (applied-training.md's n_ckpt; ``workloads.llama.remat``)."""
    return cfg.remat_policy().hbm_width(cfg) / cfg.D


def check_layouts(names: Sequence[str]) -> list[str]:
    """The layouts asked for (those the registry plans by default when none), HarnessError
    naming the valid: a registered layout plan cannot size yet (the pipelined ones) too."""
    for name in names:
        try:
            registry.layout(name)
        except ValueError as e:
            raise HarnessError(str(e)) from None
        if name in EXPERT_LAYOUTS:
            continue
        if not registry.layout(name).sized or (staged(name) and name not in PIPELINED):
            valid = plannable()
            why = ("harness plan searches ZeRO-1 pipelines (gpus.md: ZeRO-3 in a pipeline "
                   "gathers the weights again for every microbatch)" if staged(name)
                   else "harness plan cannot size it yet (it runs with harness run)")
            raise HarnessError(f"layout {name}: {why}; valid: {', '.join(valid)}")
    return list(dict.fromkeys(names)) or [*registry.planned(), *PIPELINED]


def plannable() -> list[str]:
    """Every layout ``harness plan`` can rank: the registry's sized ones, the pipelines
    searched (``harness.plan.pipeline``)."""
    return [n for n, e in registry.LAYOUTS.items()
            if e.sized and ("stage" not in e.axes or n in PIPELINED)] + [EXPERT_LAYOUTS[-1]]


def staged(name: str) -> bool:
    """Whether the layout pipelines (a ``stage`` role): harness.plan.pipeline sizes it."""
    return "stage" in registry.layout(name).axes


def candidates(names: Sequence[str], F: float, tokens: float, topology: Sequence[int]
               ) -> list[Candidate]:
    """One ``Candidate`` per layout name on the ``prod(topology)`` chips."""
    out = []
    for name in check_layouts(names):
        if staged(name) or name in EXPERT_LAYOUTS:  # searched: plan.pipeline, plan.experts
            continue
        entry = registry.layout(name)
        try:
            sizes, note = registry.role_sizes(entry, F, tokens, topology)
        except ValueError as e:
            raise HarnessError(f"layout {name}: {e}") from None
        X = math.prod(n for r, n in sizes.items() if r != "model")
        Y = sizes.get("model", 1)
        m_x, m_y = spans((X, Y), topology)
        out.append(Candidate(name, X, Y, m_x, m_y, note))
    return out
