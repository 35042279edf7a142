"""Sharded matmul ``X[B, D] @ Y[D, F] -> Z[B, F]``: every case of the book's sharding chapter.

The book (`sharding.md`, reference §4.1) writes ``A[I, J] · B[J, K]``; here I = B, J = D (the
contracting dim), K = F, and the mesh axes are X and Y. A case fixes the three partition specs
and the collective the book says it needs:

| case             | operands               | result    | book's communication             |
|------------------|------------------------|-----------|----------------------------------|
| no_comm          | X[B_X, D] Y[D, F_Y]    | Z[B_X, F_Y] | none (case 1)                  |
| allgather        | X[B, D_X] Y[D, F]      | Z[B, F]   | AllGather_X of X (case 2)        |
| allreduce        | X[B, D_X] Y[D_X, F]    | Z[B, F]   | AllReduce_X of Z{U_X} (case 3)   |
| reduce_scatter   | X[B, D_X] Y[D_X, F]    | Z[B, F_X] | ReduceScatter_X of Z{U_X} (case 3) |
| same_axis        | X[B_X, D] Y[D, F_X]    | Z[B_X, F] | AllGather_X of Y (case 4)        |
| same_axis_gather_x | X[B_X, D] Y[D, F_X]  | Z[B, F_X] | AllGather_X of X (case 4)        |

``mode="auto"`` jits ``x @ y`` with those in/out shardings and lets XLA's SPMD partitioner pick
the collectives (the book's automatic mode); ``mode="manual"`` writes the book's collective
explicitly with ``jax.shard_map`` (`jax-stuff.md`). Explicit ``x_spec``/``y_spec``/``z_spec``
strings (``"X,-"``; ``-`` = replicated, ``X+Y`` = both axes) override the case; the workload then
makes no claim about collectives.

Known XLA:CPU behaviour: in auto mode the reduce_scatter case compiles to ``all-reduce`` plus a
``dynamic-slice`` — the CPU pipeline has no ReduceScatterCreator pass (GPU has one) — so the
harness will report a mismatch there; manual mode emits ``reduce-scatter``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from predictions.step import Analytic
from workloads.base import (
    SweepFigures,
    Workload,
    WorkloadError,
    canonical_dtype,
    check_choice,
    smaller,
)
from workloads.mesh import AnyMesh, build_args, check_spec, named, shape_str

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Case:
    """Partition specs of X[B, D], Y[D, F], Z[B, F], and the book's collectives for them."""

    x: P
    y: P
    z: P
    collectives: dict[str, int]
    manual: Any  # (x_local, y_local) -> z_local inside shard_map, axis "X"


def _gather_x(x, y):  # case 2: AllGather_X(X[B, D_X]) -> X[B, D], then a local matmul
    return jax.lax.all_gather(x, "X", axis=1, tiled=True) @ y


def _gather_y(x, y):  # case 4: AllGather_X(Y[D, F_X]) -> Y[D, F]; keeps Z[B_X, F]
    return x @ jax.lax.all_gather(y, "X", axis=1, tiled=True)


def _gather_x_rows(x, y):  # case 4 the other way: AllGather_X(X[B_X, D]); keeps Z[B, F_X]
    return jax.lax.all_gather(x, "X", axis=0, tiled=True) @ y


CASES: dict[str, Case] = {
    # case 1 (`sharding.md`): contracting dim unsharded in both operands -> purely local
    "no_comm": Case(P("X", None), P(None, "Y"), P("X", "Y"), {}, lambda x, y: x @ y),
    # case 2: one operand sharded on the contracting dim -> gather it first
    "allgather": Case(P(None, "X"), P(None, None), P(None, None), {"all-gather": 1}, _gather_x),
    # case 3: both sharded on the contracting dim -> partial sums Z{U_X}, then AllReduce_X ...
    "allreduce": Case(P(None, "X"), P("X", None), P(None, None), {"all-reduce": 1},
                      lambda x, y: jax.lax.psum(x @ y, "X")),
    # ... or ReduceScatter_X into a result sharded over F
    "reduce_scatter": Case(P(None, "X"), P("X", None), P(None, "X"), {"reduce-scatter": 1},
                           lambda x, y: jax.lax.psum_scatter(x @ y, "X", scatter_dimension=1,
                                                             tiled=True)),
    # case 4: both non-contracting dims on X; Z[B_X, F_X] is illegal, gather one operand
    "same_axis": Case(P("X", None), P(None, "X"), P("X", None), {"all-gather": 1}, _gather_y),
    "same_axis_gather_x": Case(P("X", None), P(None, "X"), P(None, "X"), {"all-gather": 1},
                               _gather_x_rows),
}
MODES = ("auto", "manual")


@dataclass(frozen=True)
class MatmulConfig:
    """``X[B, D] @ Y[D, F]``. Sizes in elements; specs as ``"X,-"`` strings override ``case``."""

    B: int = 256
    D: int = 512
    F: int = 256
    dtype: str = "float32"
    case: str = "allgather"
    mode: str = "auto"
    x_spec: str = ""
    y_spec: str = ""
    z_spec: str = ""
    seed: int = 0
    trips: int = 0  # > 0: the matmul run this many times in a loop whose trip count is an
    #                 input value, so that any trips > 0 compile to one program (same HLO
    #                 fingerprint, trips x the work): a same-program slowdown made to order

    def __post_init__(self):
        check_choice("matmul case", self.case, CASES)
        if self.trips < 0:
            raise WorkloadError(f"matmul trips must be >= 0 (0: no loop), got {self.trips}")
        check_choice("matmul mode", self.mode, MODES)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        custom = [bool(s) for s in (self.x_spec, self.y_spec, self.z_spec)]
        if any(custom) and not all(custom):
            raise WorkloadError("give all of x_spec, y_spec, z_spec (like 'X,-') or none of them")
        if any(custom) and self.mode == "manual":
            raise WorkloadError("explicit specs need mode 'auto'; valid manual cases: "
                                + ", ".join(CASES))


PRESETS: dict[str, MatmulConfig] = {
    "tiny": MatmulConfig(B=64, D=128, F=64),
    "small": MatmulConfig(),
    # bf16, one v5e-sized tile per chip (roofline.md: B well above the critical 240 tokens)
    "large": MatmulConfig(B=8192, D=8192, F=8192, dtype="bfloat16"),
}


def parse_spec(text: str) -> P:
    """``"X,-"`` -> ``P("X", None)``; ``"X+Y,-"`` -> ``P(("X", "Y"), None)``."""
    entries = []
    for part in text.split(","):
        part = part.strip()
        if part in ("", "-", "None", "none"):
            entries.append(None)
        elif "+" in part:
            entries.append(tuple(a.strip() for a in part.split("+")))
        else:
            entries.append(part)
    if len(entries) != 2:
        raise WorkloadError(f"spec {text!r} needs 2 entries like 'X,-' (one per matrix dim)")
    return P(*entries)


def specs(cfg: MatmulConfig) -> tuple[P, P, P]:
    if cfg.x_spec:
        return parse_spec(cfg.x_spec), parse_spec(cfg.y_spec), parse_spec(cfg.z_spec)
    c = CASES[cfg.case]
    return c.x, c.y, c.z


def expected_collectives(cfg: MatmulConfig, mesh: AnyMesh | None = None) -> dict[str, int] | None:
    """The book's collectives for the case (`sharding.md`); None for explicit specs."""
    return None if cfg.x_spec else dict(CASES[cfg.case].collectives)


def operands(cfg: MatmulConfig) -> tuple[np.ndarray, np.ndarray]:
    """The unsharded operands as NumPy arrays (values exactly representable in ``dtype``)."""
    rng = np.random.default_rng(cfg.seed)
    x = rng.standard_normal((cfg.B, cfg.D), dtype=np.float32)
    y = rng.standard_normal((cfg.D, cfg.F), dtype=np.float32)
    cast = jnp.dtype(cfg.dtype)
    return np.asarray(x.astype(cast)), np.asarray(y.astype(cast))


def build(cfg: MatmulConfig, mesh: AnyMesh, abstract: bool = False):
    """``(fn, (x_BD, y_DF))`` with ``fn = jit(x @ y)`` sharded per the case."""
    x_spec, y_spec, z_spec = specs(cfg)
    for what, shape, spec, letters in (("X", (cfg.B, cfg.D), x_spec, "BD"),
                                       ("Y", (cfg.D, cfg.F), y_spec, "DF"),
                                       ("Z", (cfg.B, cfg.F), z_spec, "BF")):
        check_spec(mesh, f"matmul {what}{list(spec)}", shape, spec, letters)
    if cfg.mode == "manual":
        body = jax.shard_map(CASES[cfg.case].manual, mesh=mesh, in_specs=(x_spec, y_spec),
                             out_specs=z_spec, check_vma=False)
    else:
        def body(x_BD, y_DF):
            return x_BD @ y_DF
    shardings = (named(mesh, x_spec), named(mesh, y_spec))
    shapes = tuple(jax.ShapeDtypeStruct(s, jnp.dtype(cfg.dtype))
                   for s in ((cfg.B, cfg.D), (cfg.D, cfg.F)))
    host = lambda: operands(cfg)  # noqa: E731
    if cfg.trips:
        body, host = _looped(body, cfg), lambda: (*operands(cfg), np.int32(cfg.trips))
        shardings += (named(mesh, P()),)
        shapes += (jax.ShapeDtypeStruct((), jnp.int32),)
    fn = jax.jit(body, in_shardings=shardings, out_shardings=named(mesh, z_spec))
    args = build_args(abstract, shapes, shardings, host)
    log.debug("matmul %s: X%s Y%s -> Z%s", cfg.case, x_spec, y_spec, z_spec)
    return fn, args


def _looped(body, cfg: MatmulConfig):
    """``body`` run ``n`` times, ``n`` an argument, the products summed: each trip's X is
    shifted by a term of the trip number too small to change it, so that no trip can be hoisted
    out of the loop (and none needs a collective of its own)."""
    def looped(x_BD, y_DF, n):
        def trip(i, z_BF):
            return z_BF + body(x_BD + (i * 1e-30).astype(x_BD.dtype), y_DF)
        return jax.lax.fori_loop(0, n, trip, jnp.zeros((cfg.B, cfg.F), x_BD.dtype))
    return looped


def book(cfg: MatmulConfig, mesh, chip) -> Analytic:
    """The step's FLOPs over all devices; no step time (the per-op roofline is the prediction)."""
    # roofline.md: 2BDF FLOPs for X[B, D] @ Y[D, F], over all devices (per trip of the loop)
    trips = max(cfg.trips, 1)
    return Analytic(2.0 * cfg.B * cfg.D * cfg.F * trips, None,
                    "2*B*D*F (roofline.md)" + (f" x {trips} trips" if cfg.trips else ""))


def figures(cfg: MatmulConfig, mesh) -> SweepFigures:
    """In a sweep: the roofline efficiency of the matmul ops, one curve per case, mesh, dtype."""
    shape = shape_str(tuple(dict(mesh.shape).values()))
    return SweepFigures(f"{cfg.case} on {shape}, {cfg.dtype}", efficiency_of=("matmul",))


WORKLOAD = Workload(
    name="matmul",
    Config=MatmulConfig,
    build=build,
    presets=PRESETS,
    description="X[B,D] @ Y[D,F] under each sharding case of the book's sharding chapter",
    expected_collectives=expected_collectives,
    book=book,
    figures=figures,
    memory_knobs=smaller("B"),
)
