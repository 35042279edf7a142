"""The ``Workload`` record, ``WorkloadError`` and config coercion shared by every family.

Plain Python: importing this module imports no jax, so the record and the coercion can be used
before ``XLA_FLAGS`` is settled. A workload is one record: its build, its book model, its sweep
figures and its memory knobs; a family module fills in its own and ``workloads.WORKLOADS`` lists
it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from predictions import dtypes
from predictions.step import Analytic


class WorkloadError(ValueError):
    """Bad workload input. The message is one line naming what was wrong and the valid choices."""


@dataclass(frozen=True)
class BusBytes:
    """A collective's sweep point: what its bus bandwidth (nccl-tests' busbw) is computed from."""

    collective: str        # the workload's collective kind ("all_gather")
    group_size: int        # devices in each group
    message_bytes: float   # input bytes per device
    bus_bytes: float       # bytes each device moves over links (NaN where none: one device)


@dataclass(frozen=True)
class SweepFigures:
    """What a sweep summary shows for one point beyond the columns every point has; the harness
    adds what the run measured beside it (``harness.sweep.report``).

    ``efficiency_of``: op categories whose roofline efficiency the summary shows ("matmul");
    ``bus``: a collective's bytes, shown as measured and book bus bandwidth."""

    series: str                          # the curve the point belongs to in the sweep plots
    efficiency_of: tuple[str, ...] = ()
    bus: BusBytes | None = None


class FitCollective(NamedTuple):
    """A collective a fit setting's step runs (``predictions.collectives``' convention):
    ``kind`` (``"all-gather"``), ``nbytes`` (the book's V: bytes a device holds after an
    all-gather, before a reduce-scatter, of the array an all-reduce reduces), the sizes of the
    mesh axes it runs over, and how many times a step runs it."""

    kind: str
    nbytes: float
    axes: tuple[int, ...]
    count: int = 1


@dataclass(frozen=True)
class FitTrial:
    """One setting of a workload's memory knobs that ``predict-hlo``'s fit search may compile
    (``harness.plan.search``): the config values it sets, the search's stage that offers it
    (``REMAT_STAGE``, ``OFFLOAD_STAGE``, a ZeRO stage, ``MICROBATCH_STAGE``, ``BATCH_STAGE``),
    the policy it tries (a retry with the loss in more chunks keeps it), the bytes per device
    the workload's memory model gives it: in HBM and, for activations offloaded, in host
    memory, the FLOPs per device of its step, recomputation included, and the collectives its
    weights and gradients take (the search prices ``flops``, ``host_bytes`` and
    ``collectives`` on the chip to compile the cheapest first). ``steps``: steps of this
    setting that carry the tokens of the batch asked for (a smaller batch: B / B'; the search
    prices them all); ``compilable``: False for a setting the workload cannot build (a ZeRO
    stage it has no knob for) or one that changes the optimisation (a smaller batch): ranked,
    never compiled; ``note``: what its row says beyond its knobs."""

    sets: Mapping[str, str]
    stage: str
    policy: str
    need_bytes: float
    host_bytes: float = 0.0
    flops: float = 0.0
    collectives: tuple[FitCollective, ...] = ()
    steps: float = 1.0
    compilable: bool = True
    note: str = ""


REMAT_STAGE, OFFLOAD_STAGE = "remat", "offload"
# training.md (reference §6.1): ZeRO-1/2/3 shard the optimizer state / + the gradients / + the
# weights over the data axes; gradient accumulation over microbatches; a smaller batch
ZERO_STAGES = {1: "zero-1", 2: "zero-2", 3: "zero-3"}
MICROBATCH_STAGE, BATCH_STAGE = "microbatch", "smaller batch"


@dataclass(frozen=True)
class Workload:
    """One runnable family member: ``build(cfg, mesh, abstract=False) -> (fn, args)``.

    ``fn`` is a ``jax.jit``-wrapped function and ``fn(*args)`` runs one step. With
    ``abstract=True`` the args are ``jax.ShapeDtypeStruct`` carrying shardings, for ahead-of-time
    lowering. ``expected_collectives(cfg, mesh)`` gives the HLO collective opcodes the book says
    the layout needs (``{"all-gather": 1}``), or None when the workload makes no claim.
    Its default mesh spans every device (``workloads.mesh.workload_mesh``).
    ``memory(cfg, mesh) -> {component: bytes}`` is the analytic need per device (mesh None: one
    device), from the book's formulas. ``carry(args, out) -> args`` gives the next step's
    arguments when ``fn`` donates some of its inputs (a decode step's KV cache); None: every
    step reuses ``args``.

    What the harness reports about it, each from the workload's own arithmetic (``mesh``: a jax
    Mesh or anything whose ``.shape`` maps axis name -> size, such as a stored run's mesh):
    ``book(cfg, mesh, chip) -> predictions.step.Analytic`` the book's FLOPs and step time;
    ``figures(cfg, mesh) -> SweepFigures`` its sweep summary figures (None: it has no book
    model, no figures of its own); ``memory_knobs`` config field -> how to turn it to need less
    memory, named in an out-of-memory message; ``remat_order`` its ``remat`` policies from the
    least recomputation to the most; ``fit_trials(cfg, mesh, budget, given) -> [FitTrial]``
    the settings of its memory knobs that ``predict-hlo`` tries when no remat is given (it
    compiles them cheapest first by predicted step time), each with the fewest loss chunks its
    memory model puts within ``budget`` bytes a device (``given``: the overrides set on the
    command line, which it keeps).
    """

    name: str
    Config: type
    build: Callable[..., tuple[Callable[..., Any], tuple[Any, ...]]]
    presets: Mapping[str, Any]
    description: str
    mesh_axes: tuple[str, ...] = ("X", "Y")
    expected_collectives: Callable[[Any, Any], dict[str, int] | None] = field(
        default=lambda cfg, mesh: None)
    carry: Callable[[tuple, Any], tuple] | None = None
    memory: Callable[[Any, Any], dict[str, float]] | None = None
    book: Callable[[Any, Any, Any], Analytic] | None = None
    figures: Callable[[Any, Any], SweepFigures] | None = None
    memory_knobs: Mapping[str, str] = field(default_factory=dict)
    remat_order: tuple[str, ...] = ()
    fit_trials: Callable[[Any, Any, float, Mapping[str, str]], list[FitTrial]] | None = None

    def stored_config(self, values: Mapping[str, Any]) -> Any:
        """The config a run stored as ``values`` (``config_dict``, in its meta.json)."""
        try:
            return self.Config(**values)
        except TypeError as e:  # a field this Config no longer has, or lacks a default for
            raise WorkloadError(f"{self.name}: stored config does not fit "
                                f"{self.Config.__name__}: {e}") from None


def smaller(*fields: str) -> dict[str, str]:
    """Memory knobs that are sizes to make smaller: ``{"B": "a smaller --set B"}``."""
    return {f: f"a smaller --set {f}" for f in fields}


# The element types a workload can be built in (jax.numpy names); the command line accepts
# every spelling predictions.dtypes knows for them (bf16, fp32, s8, i8, ...): WORKLOAD_DTYPE_OF
# maps each spelling to the workload dtype it names.
WORKLOAD_DTYPES = ("bfloat16", "float16", "float32", "int8")
WORKLOAD_DTYPE_OF: dict[str, str] = {name: d.numpy for name, d in dtypes.NAMES.items()
                                     if d.numpy in WORKLOAD_DTYPES}
# Sizes by the book's letters (`transformers.md` notation): an override must be >= 1.
SIZE_FIELDS: dict[str, str] = {
    "B": "the batch", "T": "the sequence length", "S": "the KV-cache length", "D": "d_model",
    "F": "the MLP width", "L": "the layer count", "N": "the query heads", "K": "the KV heads",
    "H": "the head dim", "V": "the vocabulary", "nbytes": "the message size",
}
_BOOL_WORDS: dict[str, bool] = {"true": True, "1": True, "yes": True, "on": True,
                                "false": False, "0": False, "no": False, "off": False}


def check_choice(what: str, value: str, choices: Mapping[str, Any] | tuple[str, ...]) -> None:
    """Raise ``WorkloadError`` unless ``value`` is one of ``choices`` (dict keys or names)."""
    if value not in choices:
        raise WorkloadError(f"unknown {what} {value!r}; valid: {', '.join(sorted(choices))}")


def canonical_dtype(value: str, field_name: str = "dtype") -> str:
    """``"bf16"`` -> ``"bfloat16"``; unknown names raise ``WorkloadError``."""
    key = str(value).lower()
    if key not in WORKLOAD_DTYPE_OF:
        others = ", ".join(sorted(set(WORKLOAD_DTYPE_OF) - set(WORKLOAD_DTYPES)))
        raise WorkloadError(f"unknown {field_name} {value!r}; valid: "
                            f"{', '.join(sorted(WORKLOAD_DTYPES))} (or {others})")
    return WORKLOAD_DTYPE_OF[key]


def _coerce(cls: type, name: str, raw: Any, current: Any) -> Any:
    """Coerce a string from the command line to the type of the field's current value."""
    if not isinstance(raw, str):
        return raw
    kind = type(current)
    try:
        if kind is bool:
            if raw.lower() not in _BOOL_WORDS:
                raise ValueError
            return _BOOL_WORDS[raw.lower()]
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        valid = "true/false" if kind is bool else kind.__name__
        raise WorkloadError(f"{cls.__name__}.{name}={raw!r} is not a valid {valid}") from None
    if name.endswith("dtype"):
        return canonical_dtype(raw, name)
    return raw


def replace_config(cfg: Any, overrides: Mapping[str, Any] | None) -> Any:
    """A copy of the frozen ``cfg`` with ``overrides`` applied (strings coerced per field)."""
    if not overrides:
        return cfg
    cls = type(cfg)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise WorkloadError(f"{cls.__name__} has no parameter {unknown[0]!r}; "
                            f"valid: {', '.join(names)}")
    values = {k: _coerce(cls, k, v, getattr(cfg, k)) for k, v in overrides.items()}
    for k, v in values.items():
        if k in SIZE_FIELDS and isinstance(v, int) and v < 1:
            raise WorkloadError(f"{cls.__name__}.{k}={v}: {SIZE_FIELDS[k]} must be >= 1")
    return dataclasses.replace(cfg, **values)


def config_dict(cfg: Any) -> dict[str, Any]:
    """The config as a plain dict (for ``meta.json``)."""
    return dataclasses.asdict(cfg)


# A workload config's field that names its layout (``predictions.layouts``); the field keeps
# this name so that stored runs (their config and overrides) load and pair as before.
LAYOUT_FIELD = "parallelism"


def has_layouts(workload: Workload) -> bool:
    """Whether the workload's config names a layout of the registry."""
    return LAYOUT_FIELD in {f.name for f in dataclasses.fields(workload.Config)}


def with_layout(workload: Workload, overrides: Mapping[str, str] | None,
                layout: str | None = None, mesh: str | None = None) -> dict[str, str]:
    """``overrides`` with the layout set: ``layout`` (``--layout``), else the one a mesh named
    by role implies (``fsdp=4,model=2`` -> ``fsdp_tp``). WorkloadError when they disagree with
    each other or with ``--set parallelism=``, or the workload has no layouts."""
    from predictions import layouts
    from predictions.mesh import MeshError, parse_mesh

    out = dict(overrides or {})
    try:
        given = parse_mesh(mesh) if mesh else None
    except MeshError as e:
        raise WorkloadError(f"--mesh {mesh!r}: {e.reason}") from None
    roles = given.names if given is not None and layouts.is_roles(given.names) else None
    if given is not None and not roles and any(n in layouts.ROLES for n in given.names):
        raise WorkloadError(f"--mesh {mesh}: name every axis by its role "
                            f"({', '.join(layouts.ROLES)}) or none (X=4,Y=2, or 4x2)")
    set_ = out.get(LAYOUT_FIELD)
    if not has_layouts(workload):
        if layout:
            raise WorkloadError(f"{workload.name} has no layouts (--layout is for "
                                f"{LAYOUT_FIELD}-configured workloads such as llama_train)")
        if roles:
            raise WorkloadError(f"--mesh {mesh}: {workload.name}'s mesh axes are "
                                f"{', '.join(workload.mesh_axes)}, not roles of a layout; give "
                                f"{','.join(f'{a}=N' for a in workload.mesh_axes)} or a shape "
                                f"like 4x2")
        return out
    if layout and set_ and layout != set_:
        raise WorkloadError(f"--layout {layout} and --set {LAYOUT_FIELD}={set_} disagree; give "
                            f"one")
    name = layout or set_
    try:
        entry = layouts.layout(name) if name else None
        if roles:
            implied = entry or layouts.for_roles(roles)
            layouts.axes_by_role(implied, roles)  # the mesh's roles are the layout's
            name = implied.name
    except ValueError as e:
        raise WorkloadError(f"--mesh {mesh}: {e}" if roles else str(e)) from None
    if name:
        out[LAYOUT_FIELD] = name
    return out
