"""Per-instruction costs of a compiled HLO module: the predicted OPS table.

``to_desc`` turns an instruction into a ``predictions.rules.OpDesc`` (plain numbers);
``instruction_cost`` prices it through ``predictions.rules`` (a fusion through
``rules.fusion_cost``: the FLOPs of what it holds, HBM bytes of its operands and result only —
`profiling.md`: what stays inside a fusion never touches HBM); ``hlo_costs`` adds the roofline
terms on a chip, one row per instruction that runs as its own op, with ``count`` = executions
per step (while-loop trip counts multiplied through). ``module_totals`` and ``cross_check`` set
the module's sums against ``compiled.cost_analysis()``.

Row conventions: ``flops``/``hbm_bytes``/``comm_bytes`` are per execution; ``t_*_s`` and
``predicted_s`` are per step (one execution's time x ``count``), like ``measured_s``.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import replace

import pandas as pd

from harness import schema
from harness.hlo import calls, kernels, tpu
from harness.hlo.attrs import HloParseError
from harness.hlo.category import category
from harness.hlo.desc import to_desc
from harness.hlo.ir import Instruction, Module
from harness.hlo.parse import parse_module
from harness.hlo.source import source_line
from harness.hlo.walk import async_done, async_start, executed, fused_instructions, trip_count
from predictions import hardware, roofline, rules
from predictions.roofline import OpTime
from predictions.rules import CONTAINERS, STRUCTURAL, Cost, OpDesc

log = logging.getLogger(__name__)
_DONES = frozenset(rules.ASYNC_PAIRS.values())

# Which half of an async pair (predictions.rules.ASYNC_PAIRS) carries the pair's work: the
# half the trace gives its time to (harness.trace.formats: the -start's kernel on GPU and CPU,
# the -done's wait on TPU). The work is costed once, on that half; the other costs nothing.
ASYNC_TIME_ON = ("start", "done")


def pair_cost(instr: Instruction, module: Module, async_on: str = "start"
              ) -> tuple[Cost, Instruction]:
    """One execution's cost with an async pair's work on the half ``async_on`` names, and the
    instruction whose work it is (for its compute dtype)."""
    if async_on not in ASYNC_TIME_ON:
        raise ValueError(f"async_on must be one of {ASYNC_TIME_ON}, got {async_on!r}")
    if async_on == "done":
        if instr.opcode in rules.ASYNC_PAIRS and async_done(module, instr) is not None:
            return Cost(), instr  # its -done carries the work
        start = async_start(module, instr) if instr.opcode in _DONES else None
        if start is not None:
            return instruction_cost(start, module), start
    return instruction_cost(instr, module), instr


def instruction_cost(instr: Instruction, module: Module) -> Cost:
    """One execution's cost; ``rules.UNMODELED`` when no rule covers the opcode."""
    costs = module.derived.costs
    key = (instr.computation, instr.name)
    if key not in costs:
        costs[key] = _cost(instr, module)
    return costs[key]


def _cost(instr: Instruction, module: Module) -> Cost:
    if instr.opcode in CONTAINERS or instr.opcode in rules.ZERO_COST:
        return Cost()
    if instr.opcode == "async-start":
        instr = module.computation(instr.called("calls")[0]).root
    if instr.opcode in ("fusion", "fusion-start"):
        if tpu.chain_role(module, instr) == "done":
            return Cost()  # waits for a chained TPU collective (harness.hlo.tpu)
        inner = [_as_scatter(i, module, instr) for i in fused_instructions(module, instr)
                 if not tpu.in_flight(module, instr, i)]
        return rules.fusion_cost(to_desc(instr, module), inner)
    cost = rules.cost(to_desc(instr, module))
    if instr.opcode == "custom-call" and not cost.modeled:  # say which call, and why
        cost = replace(cost, notes=(calls.why_unmodeled(instr) or
                                    f"custom call {calls.target(instr)}: {'; '.join(cost.notes)}",))
    return cost


def _as_scatter(inner: Instruction, module: Module, fusion: Instruction) -> OpDesc:
    """An instruction in a fusion as a desc; an all-reduce-scatter fusion's all-reduce as the
    reduce-scatter it runs (``tpu.all_reduce_scatter``; book §4.2: V/W, not 2V/W)."""
    desc = to_desc(inner, module)
    results = tpu.all_reduce_scatter(module, fusion) \
        if inner is tpu.collective(module, fusion) else None
    return desc if results is None else replace(desc, opcode="reduce-scatter", results=results)


def why_unmodeled(cost: Cost) -> str:
    """The reason an unmodeled op's row carries (``schema.WHY_UNMODELED``); "" when modeled."""
    return "" if cost.modeled else "; ".join(dict.fromkeys(cost.notes)) or "no rule"


def compute_dtype(instr: Instruction, module: Module) -> str:
    """The element type that sets the peak FLOP/s: a dot's (or a fusion's dot's, or a library
    matmul's: cuBLAS bf16 x bf16 -> f32) left operand, otherwise the first result leaf."""
    candidates = [instr]
    if instr.opcode == "custom-call" and calls.to_desc(instr).opcode in kernels.LIBRARY_MATMULS:
        left = instr.operand_leaves  # a GEMM or convolution call: its left operand's type
        if left:
            return left[0].dtype
    if instr.opcode == "fusion":
        candidates = [i for i in fused_instructions(module, instr)
                      if i.opcode in ("dot", "convolution")] or [instr]
    first = candidates[0]
    if first.opcode in ("dot", "convolution", "ragged-dot") and first.operand_shapes:
        return first.operand_shapes[0][0].dtype
    if first.opcode == "custom-call":  # costed as a dot when its config gives dot dimensions
        desc = to_desc(first, module)
        if desc.opcode == "dot" and desc.operands:
            return desc.operands[0].dtype
    shapes = first.shapes or first.operand_leaves
    return shapes[0].dtype if shapes else "f32"


def software_seconds(instr: Instruction, module: Module, cost: Cost, chip) -> float:
    """Time of the work the host does in software (``chip.software_bytes_per_s``, CPU chips
    only): a convert to or from bf16, alone or inside a fusion, moves its bytes at the measured
    convert rate. 0 when no rate applies."""
    rate = dict(getattr(chip, "software_bytes_per_s", ()) or ()).get("convert")
    if not rate:
        return 0.0
    ops = fused_instructions(module, instr) if instr.opcode == "fusion" else [instr]
    for op in ops:
        dtypes = {s.dtype for s in op.shapes} | {s.dtype for s in op.operand_leaves}
        if op.opcode == "convert" and "bf16" in dtypes and len(dtypes) > 1:
            return cost.hbm_bytes / rate
    return 0.0


def _with_software(t: OpTime, seconds: float, chip) -> OpTime:
    """``t`` with ``seconds`` of software work as its compute term."""
    if seconds <= t.t_compute_s:
        return t
    return roofline.combine(seconds, t.t_memory_s, t.t_comm_s, chip.op_overhead_s)


def _priced(worker: Instruction, module: Module, cost: Cost, chip, dtype: str | None,
            system=None) -> tuple[OpTime, str]:
    """One execution's roofline terms on ``chip`` and the rate that set them (``schema.RATE``):
    a matmul at its own kernel's rate for its size where the chip has one
    (``harness.hlo.kernels``), software work at its software rate, bytes at the bandwidth of
    the memory they fit in."""
    dt = dtype or compute_dtype(worker, module)
    C, compute = kernels.price(chip, kernels.kernel(worker, module), dt, cost.flops)
    t = roofline.op_time(cost, chip, dt, flops_per_s=C, system=system)
    if not cost.modeled or t.bound == schema.UNMODELED:
        return t, ""
    software = software_seconds(worker, module, cost, chip)
    t2 = _with_software(t, software, chip)
    return t2, kernels.rate_label(t2.bound, compute, kernels.memory_label(chip, cost.hbm_bytes),
                                  t2 is not t)


def _as_module(hlo: str | Module) -> Module:
    return hlo if isinstance(hlo, Module) else parse_module(hlo)


def _host_link_unknown(cost: Cost, chip, name: str) -> Cost:
    """``cost``, unmodeled with the reason when it crosses a host link the chip gives no
    figure for."""
    if not cost.host_bytes or chip.pcie_bytes_per_s:
        return cost
    reason = (f"{name} copies to or from host memory, but {chip.name} has no host-link (PCIe) "
              f"bandwidth")
    log.warning("%s: left unmodeled", reason)
    return replace(cost, modeled=False, notes=cost.notes + (reason,))


def hlo_costs(hlo_text: str | Module, chip, dtype: str | None = None,
              async_on: str = "start", system=None) -> pd.DataFrame:
    """The predicted OPS table (``schema.OPS_PREDICTED``) of a compiled module on ``chip`` (a
    name or a ``predictions.hardware`` chip). ``dtype`` fixes the peak FLOP/s for every op;
    by default each op's own compute dtype is used. Unmodeled ops keep their row with zero
    times and ``bound == "unmodeled"`` (the coverage figure counts them). ``async_on``: the
    half of an async pair that carries its work ("start" or "done", ``pair_cost``).
    ``system`` (a ``predictions.network`` System): each collective priced at the network levels
    its replica groups cross (docs/networks.md); None: inside one node or slice, as before."""
    module, chip = _as_module(hlo_text), hardware.chip_entry(chip)
    rows = []
    for instr, count in executed(module):
        if instr.opcode in STRUCTURAL:
            continue
        cost, worker = pair_cost(instr, module, async_on)
        cost = _host_link_unknown(cost, chip, instr.name)
        t, rate = _priced(worker, module, cost, chip, dtype, system)
        rows.append({
            schema.PROGRAM: module.name, schema.OP: instr.name, schema.OPCODE: instr.opcode,
            schema.CATEGORY: category(module, instr), schema.COUNT: count,
            schema.FLOPS: cost.flops, schema.HBM_BYTES: cost.hbm_bytes,
            schema.COMM_BYTES: cost.comm_bytes, schema.HOST_BYTES: cost.host_bytes,
            schema.COLLECTIVE: cost.collective,
            schema.GROUP_SIZE: math.prod(cost.group_axes) if cost.group_axes else 1,
            schema.T_COMPUTE_S: t.t_compute_s * count, schema.T_MEMORY_S: t.t_memory_s * count,
            schema.T_COMM_S: t.t_comm_s * count, schema.PREDICTED_S: t.predicted_s * count,
            schema.BOUND: t.bound if cost.modeled else schema.UNMODELED,
            schema.WHY_UNMODELED: why_unmodeled(cost), schema.SOURCE_OP: instr.op_name,
            schema.SOURCE_LINE: source_line(instr, module), schema.RATE: rate,
        })
    df = pd.DataFrame(rows, columns=[*schema.OPS_PREDICTED, schema.SOURCE_OP, schema.SOURCE_LINE,
                                    schema.RATE, schema.HOST_BYTES])
    # a figure that does not apply is left out: host bytes only where a copy crosses the host
    return df if df[schema.HOST_BYTES].any() else df.drop(columns=[schema.HOST_BYTES])


def module_totals(module: str | Module, *, loops_once: bool = False) -> tuple[float, float]:
    """(FLOPs, HBM bytes) per device for one run of the module, every executed op x count.

    ``loops_once=True`` counts each while body and condition once, as XLA's
    ``HloCostAnalysis`` does (it cannot know trip counts in general)."""
    module = _as_module(module)
    flops = nbytes = 0.0
    for instr, count in executed(module, loops_once=loops_once):
        if instr.opcode in STRUCTURAL:
            continue
        cost = instruction_cost(instr, module)
        flops += count * cost.flops
        nbytes += count * cost.hbm_bytes
    return flops, nbytes


def _rel(ours: float, theirs: float | None) -> float | None:
    if theirs is None:
        return None
    if theirs == 0:
        return 0.0 if ours == 0 else math.inf
    return (ours - theirs) / theirs


def cost_dict(cost_analysis) -> dict | None:
    """What ``compiled.cost_analysis()`` returned, as one dict: jax >= 0.10 returns a dict,
    older jax a list of one dict per program (the first is taken). None for anything else."""
    if isinstance(cost_analysis, (list, tuple)):
        cost_analysis = cost_analysis[0] if cost_analysis else {}
    return cost_analysis if isinstance(cost_analysis, Mapping) else None


def cross_check(module: str | Module, cost_analysis: Mapping | list) -> dict:
    """Our module FLOPs/bytes against ``compiled.cost_analysis()`` (``'flops'``,
    ``'bytes accessed'``), with relative differences ``(ours - xla) / xla``.

    Also reported with loop bodies counted once (``*_loops_once``): when that agrees and the
    full figure does not, the difference is the trip counts XLA's analysis leaves out.
    ``xla_*`` is None when cost_analysis lacks the key (it omits 'flops' for some modules).
    """
    module = _as_module(module)
    ca = cost_dict(cost_analysis)
    if ca is None:
        raise HloParseError(f"cost_analysis: expected a dict, got {type(cost_analysis).__name__}")
    xla_flops, xla_bytes = ca.get("flops"), ca.get("bytes accessed")
    flops, nbytes = module_totals(module)
    flops1, nbytes1 = module_totals(module, loops_once=True)
    loops = {i.name: trip_count(module, i) for i, _ in executed(module) if i.opcode == "while"}
    unmodeled = sorted({i.name for i, _ in executed(module)
                        if i.opcode not in STRUCTURAL and not instruction_cost(i, module).modeled})
    report = {
        "program": module.name,
        "flops": flops, "xla_flops": xla_flops, "flops_rel_diff": _rel(flops, xla_flops),
        "flops_loops_once": flops1, "flops_loops_once_rel_diff": _rel(flops1, xla_flops),
        "hbm_bytes": nbytes, "xla_bytes": xla_bytes, "bytes_rel_diff": _rel(nbytes, xla_bytes),
        "hbm_bytes_loops_once": nbytes1,
        "bytes_loops_once_rel_diff": _rel(nbytes1, xla_bytes),
        "loops": {name: (t.n, t.source) for name, t in loops.items()},
        "unmodeled": unmodeled,
    }
    log.info("%s: FLOPs ours %.4g vs cost_analysis %s (rel %s; loops once %s); bytes ours %.4g "
             "vs %s (rel %s)", module.name, flops, xla_flops, report["flops_rel_diff"],
             report["flops_loops_once_rel_diff"], nbytes, xla_bytes, report["bytes_rel_diff"])
    return report


def cross_check_skip(module: str | Module, cost_analysis: Mapping | None) -> str:
    """Why XLA's ``cost_analysis()`` cannot check our FLOPs, or "" when it can: it reported
    nothing, a negative count (-1: unknown), or it leaves out library custom-calls that do
    FLOPs (XLA's GPU cost analysis omits cuBLAS GEMMs)."""
    if not cost_analysis:
        return "XLA's cost analysis is not available"
    flops = cost_analysis.get("flops")
    if flops is None:
        return "XLA's cost analysis reports no 'flops'"
    if flops < 0:
        return f"XLA's cost analysis reports flops={flops:g} (unknown)"
    module = _as_module(module)
    # a kernel priced by its own cost estimate (Pallas on TPU) is in XLA's figure too
    library = {i.name for i, _ in executed(module)
               if i.opcode == "custom-call" and instruction_cost(i, module).flops > 0
               and calls.to_desc(i).opcode != "kernel-estimate"}
    if library:
        return (f"XLA's cost analysis leaves out the {len(library)} library custom-call(s) that "
                f"do FLOPs (e.g. {min(library)}, a cuBLAS GEMM on GPU)")
    return ""
