"""Element types, each once: bytes per element and every name it goes by.

``DTYPES`` is the registry, keyed by HLO name; ``lookup(name)`` accepts any spelling (HLO
``bf16``, jax/numpy ``bfloat16``, the book's ``bf16``/``fp32``/``int8``, or an alias such as
``i8``), case-insensitively. The other tables are views of it:

- ``DTYPE_BYTES``: HLO element type -> bytes per element (``costs.Shape.nbytes``);
- ``PEAK_COLUMN``: any spelling -> the book's peak-FLOP/s column it runs at (``Chip.flops_per_s``);
- ``NAMES``: any spelling -> its ``DType``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """One element type. ``nbytes``: bytes per element (sub-byte types pack two per byte).
    ``kind``: float | int | uint | bool | complex | token. ``numpy``: the jax.numpy name.
    ``book``: the book's name for it. ``peak``: the book's peak-FLOP/s column this type runs
    at (the spec tables' bf16, fp8, int8, ... columns). ``None`` where there is none."""

    hlo: str
    nbytes: float
    kind: str
    numpy: str | None = None
    book: str | None = None
    peak: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling of this type, HLO name first, without repeats."""
        spelled = (self.hlo, self.numpy, self.book, *self.aliases)
        return tuple(dict.fromkeys(n for n in spelled if n))


def _f8(hlo: str, numpy: str, peak: str | None = "fp8", book: str | None = None) -> DType:
    return DType(hlo, 1, "float", numpy, book, peak)


# Bytes per element, book §1.1 (transformers.md, roofline.md): fp32 4; bf16/fp16 2; int8/fp8 1;
# int4/fp4 0.5. The rest are the HLO/numpy widths. Whole-byte widths stay ints (the byte counts
# that derive from them are ints too).
_TABLE: tuple[DType, ...] = (
    DType("pred", 1, "bool", "bool"),
    DType("token", 0, "token"),  # an ordering edge between side effects; holds no data
    DType("s4", 0.5, "int", "int4", "int4", "int4"),
    DType("u4", 0.5, "uint", "uint4", peak="int4"),
    DType("s8", 1, "int", "int8", "int8", "int8", aliases=("i8",)),
    DType("u8", 1, "uint", "uint8", peak="int8"),
    DType("s16", 2, "int", "int16"),
    DType("u16", 2, "uint", "uint16"),
    DType("s32", 4, "int", "int32"),
    DType("u32", 4, "uint", "uint32"),
    DType("s64", 8, "int", "int64"),
    DType("u64", 8, "uint", "uint64"),
    DType("f4e2m1fn", 0.5, "float", "float4_e2m1fn", "fp4", "fp4"),
    # the book's fp8 (gpus.md: H100/B200 fp8 column) is e4m3, as jax's float8_e4m3fn
    _f8("f8e4m3fn", "float8_e4m3fn", book="fp8"),
    _f8("f8e5m2", "float8_e5m2"),
    _f8("f8e4m3", "float8_e4m3"),
    _f8("f8e4m3fnuz", "float8_e4m3fnuz"),
    _f8("f8e5m2fnuz", "float8_e5m2fnuz"),
    _f8("f8e4m3b11fnuz", "float8_e4m3b11fnuz"),
    _f8("f8e3m4", "float8_e3m4", peak=None),  # no book rate claimed for this format
    _f8("f8e8m0fnu", "float8_e8m0fnu", peak=None),  # a block-scale type, not a matmul operand
    DType("bf16", 2, "float", "bfloat16", "bf16", "bf16"),
    # fp16 runs at the bf16 MXU / Tensor Core rate (the book gives no fp16 column)
    DType("f16", 2, "float", "float16", "fp16", "bf16"),
    DType("f32", 4, "float", "float32", "fp32", "fp32"),
    DType("f64", 8, "float", "float64"),
    DType("c64", 8, "complex", "complex64"),
    DType("c128", 16, "complex", "complex128"),
)

DTYPES: dict[str, DType] = {d.hlo: d for d in _TABLE}
NAMES: dict[str, DType] = {n: d for d in _TABLE for n in d.names}

DTYPE_BYTES: dict[str, float] = {d.hlo: d.nbytes for d in _TABLE}
PEAK_COLUMN: dict[str, str] = {n: d.peak for n, d in NAMES.items() if d.peak}


def lookup(name: str) -> DType:
    """The dtype any spelling names; KeyError lists the known ones (a/b: two names of one)."""
    try:
        return NAMES[str(name).lower()]
    except KeyError:
        known = ", ".join("/".join(d.names) for d in _TABLE)
        raise KeyError(f"unknown dtype {name!r}; known: {known}") from None


def nbytes(name: str) -> float:
    """Bytes per element of the dtype ``name`` spells."""
    return lookup(name).nbytes


def numpy_name(name: str) -> str:
    """The jax.numpy name (``"bf16"`` -> ``"bfloat16"``); KeyError when numpy has none."""
    d = lookup(name)
    if d.numpy is None:
        raise KeyError(f"dtype {name!r} has no jax.numpy name")
    return d.numpy


def peak_column(name: str) -> str | None:
    """The book's peak-FLOP/s column ``name`` runs at (``"f16"`` -> ``"bf16"``), or None."""
    return PEAK_COLUMN.get(str(name).lower())
