"""Out of memory ends in an answer (issue 56 part 4): the would-be peak, what holds it and the
cheapest ways to fit, for a user's own function (``harness.analyze``) or script
(``harness profile``), where ``capture.memory.check_fits`` gives a registered workload one line.

The would-be peak is the compiled program's ``memory_analysis()`` (arguments + outputs -
aliased + temporaries + code, ``capture.memory.footprint``) where it compiled, else the bytes
XLA's own message names; what holds it is the buffers at XLA's peak of the same function
compiled once more with the dump (``report.of_function``), grouped by kind; the remedies are
``remedies.rank``'s, advice only (the harness cannot change a user's remat or batch).
"""
from __future__ import annotations

import logging
import math
import re

from harness import units
from harness.capture.memory import OutOfMemory, footprint
from harness.errors import one_line
from harness.memory import buffers, remedies
from harness.record.memory import MemoryReport

log = logging.getLogger(__name__)

# XLA's words for the bytes a program wanted: TPU "Used 20.50G of 15.48G hbm", libtpu 0.0.42
# "the total memory required for HLO temporaries (18.88G) exceeds available HBM (15.75G)",
# GPU "while trying to allocate 17179869184 bytes"
_SIZE = r"([\d.]+[KMGT]?i?B?)"
NEED_IN_MESSAGE = (re.compile(rf"Used {_SIZE} of {_SIZE}"),
                   re.compile(rf"required[^(]*\({_SIZE}\) exceeds available \w+ \({_SIZE}\)"),
                   re.compile(r"allocate (\d+) bytes"))


def need_from_message(text: str) -> tuple[int | None, int | None]:
    """(bytes wanted, bytes there) as XLA's out-of-memory message names them (None: not)."""
    for pattern in NEED_IN_MESSAGE:
        m = pattern.search(text)
        if m:
            try:
                sizes = [int(units.parse_bytes(g)) for g in m.groups()]
            except units.UnitError:
                continue
            return sizes[0], (sizes[1] if len(sizes) > 1 else None)
    return None, None


def aliasable_share(fn, args: tuple, kwargs: dict) -> float:
    """The share of ``fn``'s output bytes that could be written over an argument of the same
    shape and dtype (each argument once): what donating them would alias (0 where unknown)."""
    import jax

    try:
        out = jax.eval_shape(fn, *args, **kwargs)
    except Exception:  # noqa: BLE001 - not traceable again here: no donation advice
        return 0.0
    return matched_share(jax.tree_util.tree_leaves((args, kwargs)),
                         jax.tree_util.tree_leaves(out))


def matched_share(ins, outs) -> float:
    """The share of the bytes of ``outs`` (arrays or avals) whose shape and dtype an item of
    ``ins`` has, each item matched once."""
    key = lambda a: (tuple(a.shape), str(a.dtype))  # noqa: E731
    nbytes = lambda a: math.prod(a.shape) * a.dtype.itemsize  # noqa: E731
    free: dict = {}
    for a in ins:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            free[key(a)] = free.get(key(a), 0) + 1
    matched = total = 0
    for o in outs:
        if not (hasattr(o, "shape") and hasattr(o, "dtype")):
            continue
        total += nbytes(o)
        if free.get(key(o), 0):
            free[key(o)] -= 1
            matched += nbytes(o)
    return matched / total if total else 0.0


def held(report: MemoryReport | None, devices: int, need: int | None,
         capacity: int | None, share: float = 0.0) -> remedies.Held:
    """What holds the peak per kind: the buffers at XLA's peak where the dump gave them, else
    ``memory_analysis()``'s arguments and temporaries; ``share``: ``aliasable_share``."""
    mem = report.compiled if report is not None else {}
    args = int(mem.get("arguments", 0))
    outputs = max(0, int(mem.get("outputs", 0)) - int(mem.get("aliased", 0)))
    undonated = min(int(outputs * share), args)
    if report is not None and len(report.buffers):
        return remedies.Held(buffers.by_kind(report.buffers),
                             remedies.f32_by_kind(report.buffers), devices, need or 0, capacity,
                             undonated)
    by_kind = {"arguments": args, "temporaries": int(mem.get("temporaries", 0))}
    return remedies.Held({k: v for k, v in by_kind.items() if v}, {}, devices, need or 0,
                         capacity, undonated)


def _holds_line(report: MemoryReport | None, h: remedies.Held) -> str:
    if not h.by_kind:
        return "what holds it: unknown (the program could not be compiled again with the dump)"
    parts = ", ".join(f"{k} {units.fmt_bytes(v)}" for k, v in h.by_kind.items())
    source = "the buffers live at XLA's peak" if report is not None and len(report.buffers) \
        else "memory_analysis()"
    line = f"what holds it ({source}): {parts}"
    if report is not None and len(report.buffers):
        top = report.buffers.iloc[0]
        where = f" at {top['source_line']}" if top.get("source_line") else ""
        line += (f"; the largest: {top['shape']} {top['holds']} from {top['op'] or '?'}"
                 f"{where}")
    return line


def answer(what: str, report: MemoryReport | None, need: int | None, capacity: int | None,
           kind: str = "device", devices: int = 1, error: str = "",
           share: float = 0.0) -> OutOfMemory:
    """The ``OutOfMemory`` of ``what``: its first line the verdict, then what holds the peak,
    then the ranked remedies; ``.report``, ``.remedies`` and ``.need`` carry the data."""
    mem = report.compiled if report is not None else {}
    need = need if need is not None else (int(footprint(mem)) if mem else None)
    if need is None and error:
        need, there = need_from_message(error)
        capacity = capacity if capacity is not None else there
    have = f"a {kind} holds {units.fmt_bytes(capacity)}" if capacity else f"the {kind} is full"
    head = (f"{what} does not fit: it would need {units.fmt_bytes(need)} per device, {have}"
            if need else f"{what} ran out of device memory ({one_line(error)[:200]})")
    if mem:
        head += (f" (memory_analysis: arguments {units.fmt_bytes(mem.get('arguments', 0))} + "
                 f"outputs {units.fmt_bytes(mem.get('outputs', 0))} - aliased "
                 f"{units.fmt_bytes(mem.get('aliased', 0))} + temporaries "
                 f"{units.fmt_bytes(mem.get('temporaries', 0))} + code "
                 f"{units.fmt_bytes(mem.get('code', 0))})")
    h = held(report, devices, need, capacity, share)
    ranked = remedies.rank(h)
    text = [head, _holds_line(report, h)]
    if len(ranked):
        text.append("cheapest ways to fit (advice: the harness cannot change your program), "
                    "by bytes saved per cost:")
        text += remedies.lines(ranked)
    err = OutOfMemory("\n".join(text))
    err.report, err.remedies, err.need, err.capacity = report, ranked, need, capacity
    return err


def for_function(fn, args: tuple, kwargs: dict, devices, error: BaseException,
                 report: MemoryReport | None = None) -> OutOfMemory:
    """The answer for a user's function that did not fit (``error``: ``check_fits``' refusal
    or XLA's RESOURCE_EXHAUSTED): it is compiled once more with the dump for what holds it
    (where it compiles: a refusal from XLA leaves the would-be peak to its message)."""
    from harness.capture.memory import capacity_bytes

    devices = list(devices)
    if report is None:
        try:
            from harness.memory.report import of_function

            report = of_function(fn, args, kwargs, devices)
        except Exception as e:  # noqa: BLE001 - XLA refuses it again: its message is the answer
            log.info("the out-of-memory program could not be compiled with the dump: %s", e)
    capacity = getattr(error, "capacity", None) or min(
        (c for c in (capacity_bytes(d, len(devices)) for d in devices) if c), default=None)
    kind = getattr(devices[0], "device_kind", "device") if devices else "device"
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return answer(name, report, getattr(error, "need", None), capacity, kind, len(devices),
                  "" if isinstance(error, OutOfMemory) else str(error),
                  aliasable_share(fn, args, kwargs))
