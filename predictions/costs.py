"""Cost-description types: an HLO instruction as numbers (``OpDesc``) and its per-device cost
(``Cost``, with ``+`` and ``*``). Re-exported by ``predictions.rules``, which prices them.

Conventions (`roofline.md`, `profiling.md`): shapes are per device (post-SPMD); one multiply-add
is 2 FLOPs; an op reads each operand and writes its result to HBM once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from predictions.dtypes import DTYPE_BYTES  # HLO element type -> bytes per element


def positive(name: str, value: float) -> float:
    """``value`` if it is a finite number above zero; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value



@dataclass(frozen=True)
class Shape:
    """An array shape as HLO prints it: ``f32[512,256]`` -> Shape("f32", (512, 256))."""

    dtype: str
    dims: tuple[int, ...] = ()

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> float:
        if self.dtype not in DTYPE_BYTES:
            raise KeyError(f"unknown dtype {self.dtype!r}; known: {sorted(DTYPE_BYTES)}")
        return self.elements * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class OpDesc:
    """One HLO instruction, as numbers.

    ``results``/``operands``: per-device shapes (a tuple result lists its leaves).
    ``lhs_contracting``/``rhs_contracting``/``lhs_batch``/``rhs_batch``: dot dimension numbers.
    ``group_axes``: for collectives, the sizes of the mesh axes one replica group spans
    (product = group size); () for non-collectives.
    ``dimensions``: the instruction's ``dimensions={...}`` attribute where it has one (sort
    dimension; reduce dimensions). A convolution is described as a dot over its kernel:
    ``rhs_contracting`` = every kernel dim but the output features, or only the input features
    with ``window_positions`` giving the spatial part.
    ``attention``: a fused attention call that names its sizes instead of laying out Q and K,
    as (B, T, S, N, H). ``estimate``: (FLOPs, HBM bytes) a kernel declares for itself (a Pallas
    ``CostEstimate``), for calls whose work no shape shows. ``groups``: a collective's device
    ids per replica group (``predictions.levels`` prices them by network level); None: unknown.
    """

    opcode: str
    results: tuple[Shape, ...] = ()
    operands: tuple[Shape, ...] = ()
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    group_axes: tuple[int, ...] = ()
    dimensions: tuple[int, ...] = ()
    # convolution: kernel window positions per output element that meet input data (product
    # over spatial dims); None = every window position, with the spatial dims in rhs_contracting
    window_positions: float | None = None
    attention: tuple[int, int, int, int, int] | None = None
    estimate: tuple[float, float] | None = None
    groups: tuple[tuple[int, ...], ...] | None = field(default=None, compare=False)

    @property
    def group_size(self) -> int:
        return math.prod(self.group_axes) if self.group_axes else 1

    @property
    def operand_bytes(self) -> float:
        return sum(s.nbytes for s in self.operands)

    @property
    def result_bytes(self) -> float:
        return sum(s.nbytes for s in self.results)


@dataclass(frozen=True)
class Cost:
    """Per-device cost of one execution. Costs add (``+``) and scale (``*`` by a count).

    ``collective`` names the collective kind ("all-gather", "reduce-scatter", "all-reduce",
    "all-to-all", "collective-permute") when ``comm_bytes`` moves over the interconnect;
    ``comm_bytes`` follows ``predictions.collectives``' convention for that kind.
    ``host_bytes``: bytes that cross the host link (PCIe), to or from host memory.
    ``groups``: the collective's device groups (``OpDesc.groups``), None where not known.
    """

    flops: float = 0.0
    hbm_bytes: float = 0.0
    comm_bytes: float = 0.0
    collective: str = ""
    host_bytes: float = 0.0
    group_axes: tuple[int, ...] = ()
    modeled: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)
    groups: tuple[tuple[int, ...], ...] | None = field(default=None, compare=False)

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            flops=self.flops + other.flops,
            hbm_bytes=self.hbm_bytes + other.hbm_bytes,
            comm_bytes=self.comm_bytes + other.comm_bytes,
            host_bytes=self.host_bytes + other.host_bytes,
            collective=self.collective or other.collective,
            group_axes=self.group_axes or other.group_axes,
            modeled=self.modeled and other.modeled,
            notes=self.notes + other.notes,
            groups=self.groups or other.groups,
        )

    def __mul__(self, k: float) -> "Cost":
        if not isinstance(k, (int, float)):
            return NotImplemented
        return replace(self, flops=self.flops * k, hbm_bytes=self.hbm_bytes * k,
                       comm_bytes=self.comm_bytes * k, host_bytes=self.host_bytes * k)

    __rmul__ = __mul__


UNMODELED = Cost(modeled=False)
