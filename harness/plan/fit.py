"""What ``predict-hlo`` says about memory: the fit line of a compiled program, and the report of
one libtpu refused.

libtpu checks a program's HLO temporaries against the chip's HBM early in the compile and
refuses it with one line (libtpu 0.0.42.1, ``tests/fixtures/tpu/oom``)::

    RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO
    temporaries (65.66G) exceeds available HBM (15.75G).

``parse_refusal`` reads it (libtpu's ``G`` is 2**30 bytes: a 16 GiB v5e offers 15.75G);
``refusal_lines`` says first that the program does not fit, by how much, the largest buffers
(libtpu's line names none, so those of the XLA:CPU compile of the same program, labelled) and
what would fit: a batch estimated from the message's numbers, and the remat policies left to try.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from harness.errors import HarnessError
from harness.units import fmt_bytes, fmt_decimal_bytes, parse_bytes
from predictions.rules import STRUCTURAL

_SIZE = r"([0-9.]+)\s*([KMGT]?)B?"
_REQUIRED_RE = re.compile(rf"total memory required for (?P<what>[^(]+?)\s*\({_SIZE}\)\s*"
                          rf"exceeds available (?P<where>\w+)\s*\({_SIZE}\)")
# buffers that allocate nothing of their own (views, tuples, the loop's carried state)
NO_BUFFER = STRUCTURAL - {"parameter", "constant"} | {"while", "call", "conditional"}


class RefusalUnreadable(HarnessError):
    """libtpu's out-of-memory text in a form this parser does not know."""


@dataclass(frozen=True)
class Refusal:
    """libtpu's refusal: what it needs and what the chip offers (bytes per chip)."""

    required_bytes: float
    available_bytes: float
    what: str = "HLO temporaries"   # the figure libtpu compared
    text: str = ""                  # the message as libtpu wrote it

    @property
    def over_bytes(self) -> float:
        return self.required_bytes - self.available_bytes

    @property
    def ratio(self) -> float:
        return self.required_bytes / self.available_bytes


def libtpu_bytes(number: str, unit: str) -> float:
    """``("161.32", "G")`` -> 161.32 * 2**30 (libtpu's lone K, M, G, T are binary)."""
    return parse_bytes(number + unit)


def parse_refusal(text: str) -> Refusal:
    """libtpu's out-of-memory message -> ``Refusal``; RefusalUnreadable when it is not one."""
    m = _REQUIRED_RE.search(text)
    if m is None:
        raise RefusalUnreadable(f"not libtpu's out-of-memory text (expected 'the total memory "
                                f"required for ... (N G) exceeds available HBM (N G)'): "
                                f"{text[:160]!r}")
    return Refusal(libtpu_bytes(m.group(2), m.group(3)), libtpu_bytes(m.group(5), m.group(6)),
                   " ".join(m.group("what").split()), text.strip())


@dataclass(frozen=True)
class Buffer:
    """One buffer of a compiled program: its size per device, shape and the op that makes it."""

    nbytes: float
    shape: str
    op: str
    source: str      # the JAX operation (op_name) it comes from, "" if none


def largest_buffers(module, n: int = 3) -> list[Buffer]:
    """The ``n`` largest results of the ops a program runs (its arguments included), largest
    first, one per shape and source."""
    from harness.hlo.walk import executed

    seen, out = set(), []
    for instr, _ in executed(module, loops_once=True):
        if instr.opcode in NO_BUFFER or (instr.opcode == "parameter"
                                         and instr.computation != module.entry.name):
            continue
        for s in instr.shapes:
            try:
                nbytes = s.nbytes
            except KeyError:  # token[] and other shapes with no size
                continue
            shape = f"{s.dtype}[{','.join(map(str, s.dims))}]"
            if (shape, instr.op_name) not in seen:
                seen.add((shape, instr.op_name))
                out.append(Buffer(nbytes, shape, instr.name, instr.op_name))
    return sorted(out, key=lambda b: -b.nbytes)[:n]


def batch_that_fits(refusal: Refusal, B: int, builds: Callable[[int], bool]) -> int | None:
    """The largest batch at most ``B * available / required`` that the workload can be built
    with (``builds(b)``: its dims divide the mesh), or None when none can. An estimate: it
    scales libtpu's figure in proportion to B, where weights and optimizer state do not shrink
    with the batch (so the batch that fits can be smaller)."""
    top = math.floor(B * refusal.available_bytes / refusal.required_bytes)
    return next((b for b in range(min(top, B - 1), 0, -1) if builds(b)), None)


def refusal_lines(chip: str, where: str, refusal: Refusal, buffers: Sequence[Buffer],
                  batch: tuple[int, int | None] | None, remat: str) -> list[str]:
    """The first lines ``predict-hlo`` prints for a chip whose TPU compile was refused."""
    lines = [f"{chip}: does NOT fit: {where} refused the program: its {refusal.what} need "
             f"{fmt_bytes(refusal.required_bytes)} per chip, "
             f"{fmt_bytes(refusal.available_bytes)} of HBM available "
             f"({fmt_bytes(refusal.over_bytes)} over, {refusal.ratio:.2f}x); no TPU "
             f"prediction (no step, no MFU) for it"]
    if buffers:
        lines.append("  largest buffers (libtpu's message lists none; these are XLA:CPU's "
                     "compile of the same program, per device):")
        lines += [f"    {fmt_bytes(b.nbytes)} {b.shape} {b.op}"
                  + (f" ({b.source.rsplit('/', 1)[-1]})" if b.source else "") for b in buffers]
    if batch is not None:
        B, fit = batch
        lines.append(f"  batch: B={B} refused; " + (
            f"B={fit} is estimated to fit ({B} x {fmt_bytes(refusal.available_bytes)} / "
            f"{fmt_bytes(refusal.required_bytes)}, rounded down to a B the mesh divides; weights "
            "and optimizer state do not shrink with B, so check it with --set B=...)"
            if fit else "no smaller B the mesh divides is estimated to fit: shard the weights "
            "and optimizer state (parallelism=fsdp), or use more chips"))
    if remat:
        lines.append(f"  remat: {remat}")
    return lines


def refusal_json(refusal: Refusal, buffers: Sequence[Buffer],
                 batch: tuple[int, int | None] | None, remat: str) -> dict:
    return {**asdict(refusal), "over_bytes": refusal.over_bytes,
            "largest_buffers_xla_cpu": [asdict(b) for b in buffers],
            "batch_refused": batch[0] if batch else None,
            "batch_estimated_to_fit": batch[1] if batch else None, "remat": remat}


def remat_hint(order: Sequence[str], given: str | None, chose: bool) -> str:
    """What remat can still do: nothing new when ``predict-hlo``'s fit search set it
    (``chose``: every policy was pruned or refused, the note says which); else the policies
    after the one given, which recompute more and hold less."""
    if not order:
        return ""
    if chose:
        return (f"the fit search pruned or compiled every policy ({', '.join(order)}), with the "
                f"loss in chunks and the offloads, and none fits (the note below)")
    later = list(order[order.index(given) + 1:]) if given in order else []
    return (f"remat={given} was given; policies that keep less: {', '.join(later)} (leave out "
            "--set remat for predict-hlo to try them in order)" if later
            else f"remat={given} already keeps the least")


def fit_line(fit: dict, chip: str) -> str:
    """One line: what memory_analysis() says a chip holds, added up, the peak beside the sum
    and which of them the verdict uses."""
    parts = [("arguments", "+"), ("outputs", "+"), ("aliased", "-"), ("temporaries", "+"),
             ("code", "+")]
    gb = fmt_decimal_bytes  # the book's GB: 1e9 bytes
    terms = " ".join(f"{sign} {name} {gb(fit.get(name, 0))}" for name, sign in parts)[2:]
    verdict = (f"fits, {gb(fit['headroom_bytes'])} free" if fit["fits"]
               else f"does NOT fit, {gb(-fit['headroom_bytes'])} over")
    if fit.get("placed_past_book"):
        verdict = (f"fits: the TPU compiler placed every buffer ({gb(-fit['headroom_bytes'])} "
                   f"past the book's HBM, within what libtpu counts usable, in GiB)")
    if fit.get("host_peak"):
        why = (f"XLA's peak {gb(fit['peak'])} is the host memory's (offloaded activations), "
               f"so the verdict uses the sum")
    elif fit.get("peak"):
        why = (f"XLA's peak {gb(fit['peak_bytes'])} is what the verdict uses: it counts only "
               f"buffers live at the same time (buffers whose lifetimes do not overlap share "
               f"memory), {gb(fit['sum_bytes'] - fit['peak_bytes'])} below the sum, which "
               f"holds every buffer at once and is an upper bound")
    else:
        why = "XLA reports no peak, so the verdict uses the sum, an upper bound"
    return (f"memory per chip: {terms} = {gb(fit['sum_bytes'])} (the sum); {why}; "
            f"{gb(fit['peak_bytes'])} of {chip}'s {gb(fit['hbm_bytes'])} HBM: {verdict}")


def describe_refusal(exc: Exception, chip: str, workload, preset: str, overrides: dict,
                     mesh_shape: str, cpu_module, chose_remat: bool) -> tuple[list[str], dict]:
    """``(lines, json)`` for a chip whose TPU compile raised ``HbmExhausted`` ``exc``: the
    refusal read, the largest buffers of the CPU compile ``cpu_module`` (None: not compiled),
    the batch estimated to fit and what remat can still do."""
    import workloads
    from workloads.base import WorkloadError
    from workloads.mesh import abstract_mesh

    where, _, message = str(exc).partition(": ")
    try:
        refusal = parse_refusal(message)
    except RefusalUnreadable:
        return ([f"{chip}: does NOT fit: {exc}; no TPU prediction (no step, no MFU) for it"],
                {"text": str(exc)})
    cfg = workloads.make_config(workload.name, preset, overrides)

    def builds(b: int) -> bool:
        try:
            trial = workloads.make_config(workload.name, preset, {**overrides, "B": str(b)})
            workload.build(trial, abstract_mesh(mesh_shape, workload.mesh_axes), abstract=True)
        except WorkloadError:
            return False
        return True

    batch = (cfg.B, batch_that_fits(refusal, cfg.B, builds)) if hasattr(cfg, "B") else None
    remat = remat_hint(workload.remat_order, getattr(cfg, "remat", None), chose_remat)
    buffers = largest_buffers(cpu_module) if cpu_module is not None else []
    return (refusal_lines(chip, where, refusal, buffers, batch, remat),
            refusal_json(refusal, buffers, batch, remat))
