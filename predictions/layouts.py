"""The one registry of layouts: how a model is split over a device mesh, by the role of each
mesh axis (`sharding.md`, `training.md` §6).

A mesh axis plays a role (``ROLES``): ``data`` splits the batch, ``fsdp`` the batch and the
weights (ZeRO-3), ``model`` the heads, F and V (Megatron tensor parallelism), ``stage`` the
layers (pipeline parallelism: ``stage_axes``; ``workloads.llama.pipeline``). A layout
(``Layout``) names the roles of its mesh axes, in mesh order, and which roles split what: the
batch (activations' B), the weights' D dim, the model's heads/F/V. The workloads turn an entry
into PartitionSpecs (``workloads.llama.sharding``); ``harness plan`` and ``harness predict
train`` price the same entry with the book's model (``strategy``) at the split it gives
(``sizes``). A composed layout runs its parts on separate axes: ``fsdp_tp`` is ``fsdp`` over
one axis and ``tp`` over the next; ``a+b`` composes any registered parts (``pp+fsdp_tp``: the
pipeline's stages over the first axis, FSDP and TP over the next two). A new layout registers
an entry (``register``); nothing else changes.

Which mesh axis plays which role (``axes_by_role``): on a mesh whose axes are named by role
(``--mesh fsdp=4,model=2``) by name; on one named otherwise (``4x2``, axes X, Y) by position,
the layout's roles in order, the last taking every axis left (``dp`` on 4x2 splits the batch
over X and Y).

Stdlib only: workloads, predictions and the harness all read it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from predictions import training
from predictions.topology import spans

# role of a mesh axis -> what it splits
ROLES: dict[str, str] = {
    "data": "splits the batch; weights replicated, gradients all-reduced (data parallelism)",
    "fsdp": "splits the batch and the weights' D, gathered just in time; gradients "
            "reduce-scattered (FSDP, ZeRO-3)",
    "model": "splits attention heads, the MLP width F and the vocabulary V (Megatron tensor "
             "parallelism)",
    "stage": "splits the layers: each stage holds L/S consecutive layers, activations pass "
             "stage to stage (pipeline parallelism, training.md and gpus.md, reference §6.2)",
    "expert": "splits each MoE layer's E experts and the batch: tokens go to their experts' "
              "devices and back by two all-to-alls a layer, dispatch and combine (expert "
              "parallelism, transformers.md and gpus.md, reference §5.4 and §6.2)",
}
# Sizing: (F, batch tokens, chips, the slice's topology) -> (size of each of the layout's mesh
# axes, a note); how plan and predict train split the chips among the layout's axes.
Sizes = Callable[[float, float, int, Sequence[int]], tuple[tuple[int, ...], str]]


def _all_on_one(F: float, tokens: float, n: int, topology: Sequence[int]):
    return (n,), ""


def _unsized(F: float, tokens: float, n: int, topology: Sequence[int]):
    raise ValueError("this layout gives no split of the chips among its axes; register it "
                     "with its sizes")


def _book_split(F: float, tokens: float, n: int, topology: Sequence[int]):
    """Two axes at the book's X_opt (training.md §6.2: X_opt = sqrt((B/F) * (M_X/M_Y) * N),
    rounded to a power of two, ``training.fsdp_tp_split``). M_X and M_Y depend on the split, so
    the split is made with the spans of the previous guess until it stops moving; X stays
    within [2, N/2] so the layout mixes both (at the ends it is one layout alone)."""
    X, Y, axes = 1, n, (1, 1)
    for _ in range(4):
        X, Y = training.fsdp_tp_split(F, tokens, n, axes)
        new = spans((X, Y), topology)
        if new == axes:
            break
        axes = new
    note = ""
    if X < 2 or X > n // 2:
        x_opt = training.fsdp_tp_optimum(F, tokens, n, axes)
        X = min(max(X, 2), n // 2)
        Y = n // X
        note = f"X_opt={x_opt:,.0f} clamped to X={X} (a mix of both)"
    return (X, Y), note


@dataclass(frozen=True)
class Layout:
    """One layout: the roles of its mesh axes in order (``axes``), the roles that split the
    batch, the weights' D dim and the model's heads/F/V, the book's model that prices it
    (``training.STRATEGIES``), how plan sizes its axes, and whether ``harness plan`` tries it
    by default."""

    name: str
    axes: tuple[str, ...]
    batch: tuple[str, ...]
    weights: tuple[str, ...]
    model: tuple[str, ...]
    strategy: str
    about: str
    sizes: Sizes = field(default=_all_on_one, compare=False, repr=False)
    planned: bool = True

    @property
    def sized(self) -> bool:
        """Whether ``harness plan`` can split the chips among its axes (its ``sizes``)."""
        return self.sizes is not _unsized


LAYOUTS: dict[str, Layout] = {}


def register(entry: Layout) -> Layout:
    """Add ``entry`` to ``LAYOUTS`` (its roles must be ``ROLES``); returns it."""
    unknown = [r for r in (*entry.axes, *entry.batch, *entry.weights, *entry.model)
               if r not in ROLES]
    if unknown or len(set(entry.axes)) != len(entry.axes):
        raise ValueError(f"layout {entry.name!r}: roles {', '.join(entry.axes)} must be distinct "
                         f"and among {', '.join(ROLES)}")
    LAYOUTS[entry.name] = entry
    return entry


def compose(name: str, *parts: Layout, about: str = "", strategy: str | None = None,
            sizes: Sizes | None = None, planned: bool = True) -> Layout:
    """The parts on separate mesh axes, in order: their axes, and what each splits, joined."""
    join = lambda what: tuple(r for p in parts for r in getattr(p, what))  # noqa: E731
    return Layout(name, join("axes"), join("batch"), join("weights"), join("model"),
                  strategy or parts[-1].strategy,
                  about or " + ".join(p.about for p in parts),
                  sizes or _unsized, planned)


DP = register(Layout("dp", ("data",), ("data",), (), (), "dp",
                     "data parallel: the batch over every axis, weights replicated"))
FSDP = register(Layout("fsdp", ("fsdp",), ("fsdp",), ("fsdp",), (), "fsdp",
                       "FSDP (ZeRO-3): the batch and the weights over every axis"))
TP = register(Layout("tp", ("model",), (), (), ("model",), "tp",
                     "tensor parallel (Megatron): heads, F and V over every axis"))
register(compose("fsdp_tp", FSDP, TP, strategy="fsdp_tp", sizes=_book_split,
                 about="FSDP over the first axis, tensor parallel over the rest (§6.2)"))
# a dp_tp mesh moves DP's gradient bytes over X and TP's activations over Y: priced as the
# book's FSDP+TP model on the same X and Y (training.md); plan tries it when asked
register(compose("dp_tp", DP, TP, strategy="fsdp_tp", sizes=_book_split, planned=False,
                 about="replicas over the first axis, tensor parallel over the rest (§7.4)"))
# serving (inference.md; reference §7.4): dp_tp's weights with the KV cache KV[2, B_Z, S, K_Y, H],
# heads K-way and the batch over the Z = Y/K model devices that share a head
# (predictions.serving_layouts.WORKLOAD_PARALLELISMS; workloads.llama.sharding.batch_kv_mesh)
register(compose("dp_tp_kv_batch", DP, TP, strategy="fsdp_tp", sizes=_book_split, planned=False,
                 about="dp_tp; the KV cache on the batch over the model devices that share a "
                       "head (inference.md)"))
# ... or KV[2, B_X, S_Z, K_Y, H]: the sequence over those Z, combined flash-style (long context)
register(compose("dp_tp_kv_seq", DP, TP, strategy="fsdp_tp", sizes=_book_split, planned=False,
                 about="dp_tp; the KV cache on the sequence over the model devices that share "
                       "a head, combined flash-style (inference.md)"))


# Pipeline parallelism (training.md, gpus.md; reference §6.2): the layers over a `stage` axis.
# `pp` alone pipelines over the first axis and keeps data-parallel replicas of the pipeline on
# the rest (how every published pipeline runs: 4 stages x 2 replicas on 8 devices); in a
# composition `pp+b` it contributes the stage axis only (PARTS), `b` the rest. Priced by the
# book's model of what splits the batch. Their sizes are searched (S, M and the schedule, within
# the memory that fits: harness.plan.pipeline), not split from F and the batch alone, so they
# are not in ``planned()``; harness plan adds its pipelines itself.
STAGE = Layout("stage", ("stage",), (), (), (), "dp", "the layers over the stage axis",
               planned=False)
# a name's part in a composition `a+b`, where it is not the registered entry itself
PARTS: dict[str, Layout] = {"pp": STAGE}


def _searched(F: float, tokens: float, n: int, topology: Sequence[int]):
    raise ValueError("a pipeline's stages, microbatches and schedule are searched within the "
                     "memory that fits (harness.plan.pipeline), not split from F and B alone")


register(compose("pp", STAGE, DP, planned=False, sizes=_searched,
                 about="pipeline: the layers over the first axis (stage), the batch over the "
                       "rest (data-parallel replicas of the pipeline)"))
for _part in ("dp", "fsdp", "tp", "fsdp_tp", "dp_tp"):
    register(compose(f"pp+{_part}", STAGE, LAYOUTS[_part], planned=False, sizes=_searched))


# Expert parallelism (transformers.md "Sparsity and Mixture-of-Experts", gpus.md "Expert
# parallelism"; reference §5.4, §6.2): E experts over the `expert` axis, which also splits the
# batch (attention and the dense weights see it as data parallelism, as DeepSeek-V3 runs it);
# `workloads.llama.moe` dispatches and combines tokens over it by all-to-all. Priced by the
# book's model of what splits the batch (plan ranks expert layouts in a later issue).
# Their sizes are searched (Z, the other axes and the capacity factor, within the memory
# that fits: harness.plan.experts), not split from F and the batch alone.
def _expert_searched(F: float, tokens: float, n: int, topology: Sequence[int]):
    raise ValueError("an expert layout's Z, other axes and capacity factor are searched within "
                     "the memory that fits (harness.plan.experts), not split from F and B alone")


EP = register(Layout("ep", ("expert",), ("expert",), (), (), "dp",
                     "expert parallel: the experts and the batch over every axis",
                     sizes=_expert_searched, planned=False))
register(compose("dp_ep", DP, EP, planned=False, sizes=_expert_searched,
                 about="replicas over the first axis, the experts over the rest (the batch "
                       "over both)"))
for _part in ("fsdp", "tp", "fsdp_tp", "dp_tp"):
    register(compose(f"ep+{_part}", EP, LAYOUTS[_part], planned=False,
                     sizes=_expert_searched))


def layout(name: str) -> Layout:
    """The registered layout ``name``, or ``a+b`` composed of registered parts. ValueError
    naming the valid ones."""
    if name in LAYOUTS:
        return LAYOUTS[name]
    parts = name.split("+")
    if len(parts) > 1 and all(p in LAYOUTS for p in parts):
        entry = compose(name, *(PARTS.get(p, LAYOUTS[p]) for p in parts), planned=False)
        if len(set(entry.axes)) == len(entry.axes):
            return entry
        raise ValueError(f"layout {name!r}: its parts share a mesh axis role "
                         f"({', '.join(entry.axes)}); compose parts on separate roles")
    raise ValueError(f"unknown layout {name!r}; valid: {', '.join(LAYOUTS)} (or parts joined "
                     f"by '+')")


def planned() -> list[str]:
    """The layouts ``harness plan`` tries by default."""
    return [n for n, e in LAYOUTS.items() if e.planned]


def is_roles(names: Sequence[str]) -> bool:
    """Whether mesh axes so named are named by role (``fsdp``, ``model``), not by position."""
    return bool(names) and all(n in ROLES for n in names)


def for_roles(names: Sequence[str]) -> Layout:
    """The layout whose mesh axes are these roles (``fsdp, model`` -> ``fsdp_tp``); the first
    registered one when several are. ValueError naming those there are."""
    for entry in LAYOUTS.values():
        if set(entry.axes) == set(names):
            return entry
    known = "; ".join(f"{n}: {','.join(e.axes)}" for n, e in LAYOUTS.items())
    raise ValueError(f"no layout has mesh axes {', '.join(names)}; the layouts' axes: {known}")


def axes_by_role(entry: Layout, names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The mesh axes (of the mesh's axis ``names``) that play each of ``entry``'s roles: by
    name where the mesh's axes are named by role, else by position (the roles in order, the
    last taking every axis left). ValueError when the mesh does not fit the layout."""
    names = tuple(names)
    if is_roles(names):
        if set(names) != set(entry.axes):
            raise ValueError(f"layout {entry.name} has mesh axes {', '.join(entry.axes)}; the "
                             f"mesh's are {', '.join(names)}")
        return {r: (r,) for r in entry.axes}
    if any(n in ROLES for n in names):
        raise ValueError(f"mesh axes {', '.join(names)}: name every axis by its role "
                         f"({', '.join(ROLES)}) or none (X, Y, or a shape like 4x2)")
    k = len(entry.axes)
    if len(names) < k:
        got = ", ".join(names) or "none"
        raise ValueError(f"{entry.name} needs a {k}-D mesh ({', '.join(entry.axes)}), got axes "
                         f"{got}; give the mesh a Y axis of size 1 (Nx1)")
    out = {r: (names[i],) for i, r in enumerate(entry.axes[:-1])}
    out[entry.axes[-1]] = names[k - 1:]
    return out


def split(entry: Layout, shape: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
    """What each of batch, weights and model is split over on a mesh of ``shape`` (axis name
    -> size, in order): mesh axis names, in mesh order."""
    by_role = axes_by_role(entry, tuple(shape))
    order = list(shape)

    def over(roles: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted({a for r in roles for a in by_role[r]}, key=order.index))

    return {"batch": over(entry.batch), "weights": over(entry.weights),
            "model": over(entry.model)}


def degrees(entry: Layout, shape: Mapping[str, int]) -> tuple[int, int]:
    """The book's (X, Y) of ``entry`` on a mesh of ``shape``: devices over the data and FSDP
    axes, and over the model axes (training.md's letters)."""
    by_role = axes_by_role(entry, tuple(shape))
    size = lambda roles: math.prod(shape[a] for r in roles for a in by_role.get(r, ()))  # noqa
    # the expert axis splits the batch too: data parallelism to the dense weights (§6.2)
    return size(("data", "fsdp", "expert")), size(("model",))


def stage_axes(entry: Layout, shape: Mapping[str, int]) -> tuple[str, ...]:
    """The mesh axes (of a mesh of ``shape``) that split the layers into pipeline stages; ()
    for a layout without a ``stage`` role."""
    return axes_by_role(entry, tuple(shape)).get("stage", ())


def expert_axes(entry: Layout, shape: Mapping[str, int]) -> tuple[str, ...]:
    """The mesh axes (of a mesh of ``shape``) that split the experts of each MoE layer; () for
    a layout without an ``expert`` role."""
    return axes_by_role(entry, tuple(shape)).get("expert", ())


def role_sizes(entry: Layout, F: float, tokens: float, topology: Sequence[int]
               ) -> tuple[dict[str, int], str]:
    """Each of the layout's roles' size on the ``prod(topology)`` chips of a slice, as plan
    sizes them (``Layout.sizes``), and a note."""
    dims, note = entry.sizes(F, tokens, math.prod(topology), topology)
    return dict(zip(entry.axes, dims)), note
