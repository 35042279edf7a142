"""The three peaks per device side by side: measured (the allocator's), compiled (XLA's
``memory_analysis()`` and the buffers live at its peak) and the book's model, what holds each,
and each difference over 10% explained where it can be.

The book's model is the workload's own (``Workload.memory``: ``workloads.llama.memory``, after
training.md §6.3 (10 bytes a parameter with AdamW, gradients beside them), transformers.md §5.2
(activations kept by the remat policy), inference.md §5.3 (the KV cache)); its terms map onto
the kinds the compiled buffers are grouped by (``BOOK_KINDS``). A difference is explained by
the registry ``EXPLAINERS``: each looks at one kind's buffers and says what part of their bytes
the book does not count (f32 copies of bf16 values, padding to tiles).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import pandas as pd

from harness import schema, units
from harness.memory import kinds

THRESHOLD = 0.10  # a difference past this is explained (issue 56)
BOOK_KINDS = {"parameters": kinds.PARAMETERS, "gradients": kinds.GRADIENTS,
              "optimizer": kinds.OPTIMIZER, "activations": kinds.ACTIVATIONS,
              "logits": kinds.TEMPORARIES, "transients": kinds.TEMPORARIES,
              "kv_cache": kinds.KV_CACHE, "outputs": kinds.OUTPUTS}
# why a platform measures no peak (others read memory_stats()["peak_bytes_in_use"])
UNMEASURED = {"cpu": "none measured: XLA's CPU devices keep no allocator statistics "
                     "(memory_stats() is None)"}
_ITEMSIZE = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2,
             "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1}
_TYPE = re.compile(r"^([a-z]\w*)\[")


def measured_peak(devices) -> tuple[int | None, str]:
    """The largest ``peak_bytes_in_use`` of ``devices`` (the process's whole life: read it in
    a fresh process), or None and why none is measured."""
    peaks = []
    for d in devices:
        try:
            stats = d.memory_stats()
        except Exception:  # noqa: BLE001 - not implemented on every backend
            stats = None
        if stats and stats.get("peak_bytes_in_use") is not None:
            peaks.append(int(stats["peak_bytes_in_use"]))
    if peaks:
        return max(peaks), "memory_stats() peak_bytes_in_use, the process's whole life"
    platform = getattr(next(iter(devices), None), "platform", "")
    return None, UNMEASURED.get(platform, f"none measured: {platform or 'the'} devices "
                                          "report no memory_stats()")


def book_by_kind(book: Mapping[str, float]) -> dict[str, float]:
    """The book's terms summed per kind (``BOOK_KINDS``; an unknown term is a temporary)."""
    out: dict[str, float] = {}
    for term, value in book.items():
        kind = BOOK_KINDS.get(term, kinds.TEMPORARIES)
        out[kind] = out.get(kind, 0.0) + float(value)
    return out


def _elements_bytes(shape: str) -> int | None:
    m = _TYPE.match(shape)
    size = _ITEMSIZE.get(m.group(1)) if m else None
    if size is None:
        return None
    n = 1
    for d in kinds.dims(shape):
        n *= d
    return n * size


def upcast_bytes(rows: pd.DataFrame, dtype_bytes: int) -> int:
    """Bytes of f32 copies the compiler made where the model's dtype is narrower (a convert's
    f32 result: XLA:CPU computes bf16 in f32)."""
    if dtype_bytes >= 4 or not len(rows):
        return 0
    copies = rows[rows[schema.SHAPE].str.startswith("f32")
                  & rows[schema.OP].str.contains("convert")]
    return int(copies[schema.BUFFER_BYTES].sum())


def padding_bytes(rows: pd.DataFrame) -> int:
    """Bytes allocated past the elements' own (padding to the layout's tiles)."""
    pad = 0
    for shape, size in zip(rows[schema.SHAPE], rows[schema.BUFFER_BYTES]):
        own = _elements_bytes(shape)
        pad += max(0, int(size) - own) if own is not None else 0
    return pad


def _upcast(rows: pd.DataFrame, dtype_bytes: int) -> str:
    n = upcast_bytes(rows, dtype_bytes)
    return (f"{units.fmt_bytes(n)} are f32 copies the compiler made of narrower values "
            f"(XLA:CPU computes bf16 in f32)" if n else "")


def _padding(rows: pd.DataFrame, dtype_bytes: int) -> str:
    n = padding_bytes(rows)
    return f"{units.fmt_bytes(n)} are padding to tiles" if n else ""


def _scopes(rows: pd.DataFrame, dtype_bytes: int) -> str:
    """The largest makers, so that what the book leaves out has a name."""
    top = rows.groupby(schema.SCOPE)[schema.BUFFER_BYTES].sum().nlargest(2)
    return "most from " + "; ".join(f"{s or '?'} ({units.fmt_bytes(int(b))})"
                                    for s, b in top.items()) if len(top) else ""


EXPLAINERS: tuple[Callable[[pd.DataFrame, int], str], ...] = (_upcast, _padding, _scopes)


def explain(rows: pd.DataFrame, book: float, compiled: float, dtype_bytes: int) -> str:
    """Why one kind's compiled bytes are off the book's by more than ``THRESHOLD``."""
    if book and abs(compiled / book - 1) <= THRESHOLD:
        return ""
    if not len(rows):
        return "none live at the compiled peak" if book else ""
    said = [s for s in (f(rows, dtype_bytes) for f in EXPLAINERS) if s]
    lead = "" if book else "the book does not count it; "
    return lead + "; ".join(said)


def holds_table(buffers: pd.DataFrame, book: Mapping[str, float], dtype_bytes: int = 2
                ) -> pd.DataFrame:
    """``schema.HOLDS_TABLE``: per kind, the book's bytes, the compiled peak's, their
    difference and why; then the total. Without a book model (a user's own program) the
    book's column is blank, not 0, and each kind names its largest makers."""
    want, nobook = book_by_kind(book), not book
    have = buffers.groupby(schema.HOLDS)[schema.BUFFER_BYTES].sum() if len(buffers) else {}
    rows = []
    for kind in kinds.KINDS:
        b, c = want.get(kind, 0.0), float(have[kind]) if kind in have else 0.0
        if not b and not c:
            continue
        mine = buffers[buffers[schema.HOLDS] == kind] if len(buffers) else buffers
        rows.append({schema.HOLDS: kind, schema.BOOK_BYTES: None if nobook else b,
                     schema.COMPILED_BYTES: c, schema.DIFFERENCE: c / b - 1 if b else None,
                     schema.EXPLAINED: _scopes(mine, dtype_bytes) if nobook
                     else explain(mine, b, c, dtype_bytes)})
    tb, tc = sum(want.values()), float(sum(have[k] for k in have.index)) if len(have) else 0.0
    rows.append({schema.HOLDS: "peak", schema.BOOK_BYTES: None if nobook else tb,
                 schema.COMPILED_BYTES: tc,
                 schema.DIFFERENCE: tc / tb - 1 if tb else None,
                 schema.EXPLAINED: _peak_reason(buffers, tb, tc, dtype_bytes)})
    return pd.DataFrame(rows, columns=list(schema.HOLDS_TABLE))


def _peak_reason(buffers: pd.DataFrame, book: float, compiled: float, dtype_bytes: int) -> str:
    """The whole peak's difference: the parts the explainers name, and how far the compiled
    peak is from the book's without them."""
    if not book or not len(buffers) or abs(compiled / book - 1) <= THRESHOLD:
        return ""
    named = upcast_bytes(buffers, dtype_bytes) + padding_bytes(buffers)
    said = [s for s in (f(buffers, dtype_bytes) for f in (_upcast, _padding)) if s]
    if not named:
        return ""
    rest = compiled - named
    return "; ".join(said) + (f"; without them the compiled peak is {units.fmt_bytes(rest)}, "
                              f"{rest / book - 1:+.0%} from the book's")


def footprint_note(memory: Mapping[str, float], live_peak: int | None) -> str:
    """How ``memory_analysis()``'s sum (arguments + outputs - aliased + temporaries + code) and
    the bytes live at XLA's peak differ: outputs not yet written at the peak, and the
    temporaries' arena packed with gaps (fragmentation)."""
    from harness.capture.memory import footprint

    if not memory or not live_peak:
        return ""
    total = footprint(memory)
    gap = total - live_peak
    return (f"memory_analysis: arguments {units.fmt_bytes(memory.get('arguments', 0))} + "
            f"outputs {units.fmt_bytes(memory.get('outputs', 0))} - aliased "
            f"{units.fmt_bytes(memory.get('aliased', 0))} + temporaries "
            f"{units.fmt_bytes(memory.get('temporaries', 0))} + code "
            f"{units.fmt_bytes(memory.get('code', 0))} = {units.fmt_bytes(total)}; the buffers "
            f"live at the peak hold {units.fmt_bytes(live_peak)}; the other "
            f"{units.fmt_bytes(gap)} are outputs not yet written at the peak and the "
            f"temporaries' arena packed with gaps")
