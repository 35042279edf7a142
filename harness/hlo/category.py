"""A category per executed HLO instruction, one of ``schema.CATEGORIES``.

Rules, in order (kept simple on purpose; the registries below are the whole story):

1. A plain instruction takes its opcode's category from ``OPCODE_CATEGORY`` (``other`` when
   absent): ``predictions.rules.CATEGORY`` plus the opcodes only the HLO layer sees. Async
   ``-start``/``-done`` pairs take the category of what they wrap.
2. A custom call takes the category of the rule that prices it (``harness.hlo.calls``: a
   GEMM is a matmul, a splash attention kernel attention) when that is not ``other``; else the
   first ``CUSTOM_CALL_CATEGORY`` entry whose key occurs in its target (``__cublas$gemm`` ->
   matmul, ``__cudnn$fmha...`` -> attention), else ``other``.
3. A fusion, custom call or dot whose metadata ``op_name`` mentions one of ``ATTENTION_WORDS``
   is ``attention`` (the LLaMA workloads name their attention scope ``attention``); so is a
   fusion containing both a dot and an ``exponential``.
4. Otherwise a fusion takes the highest-priority category among the instructions inside it
   (``FUSION_PRIORITY``: collective > matmul > reduction > elementwise > copy > other),
   ignoring scalar index arithmetic when it also holds array work. A fusion that holds a dot is
   a matmul (`profiling.md`: a fusion holds at most one matmul plus the elementwise work fused
   around it); a TPU fusion that ``calls=`` a collective is a collective.
"""
from __future__ import annotations

from harness import schema
from harness.hlo import calls, tpu
from harness.hlo.ir import Instruction, Module
from harness.hlo.walk import fused_instructions
from predictions import rules

MATMUL, ATTENTION, COLLECTIVE, ELEMENTWISE, REDUCTION, COPY, OTHER = schema.CATEGORIES

# predictions.rules.CATEGORY (plain opcodes) plus what only the HLO layer sees: every async
# ``-start``/``-done`` form, point-to-point transfers, and reinterpretations/relayouts as copies.
OPCODE_CATEGORY: dict[str, str] = {
    **rules.CATEGORY,
    **{op: COLLECTIVE for c in rules.COLLECTIVE_OPCODES for op in (c, f"{c}-start", f"{c}-done")},
    **{op: COLLECTIVE for op in ("send", "recv", "send-done", "recv-done")},
    **{op: COPY for op in ("copy-start", "copy-done", "bitcast-convert", "reshape")},
    **{f"{s}{a}": COPY for s in rules.ASYNC_SLICES for a in ("-start", "-done")},
    "ragged-dot": MATMUL,
}

CUSTOM_CALL_CATEGORY: dict[str, str] = {
    "fmha": ATTENTION, "fhma": ATTENTION, "flash": ATTENTION, "attention": ATTENTION,
    "attn": ATTENTION,  # TransformerEngine's te_fused_attn_*
    "gemm": MATMUL, "matmul": MATMUL, "conv": MATMUL,
    "allreduce": COLLECTIVE, "all-reduce": COLLECTIVE, "allgather": COLLECTIVE,
}

ATTENTION_WORDS = ("attention", "softmax", "flash", "fmha")

FUSION_PRIORITY = (COLLECTIVE, MATMUL, REDUCTION, ELEMENTWISE, COPY, OTHER)

_ASYNC_WRAPPERS = ("async-start", "async-update", "async-done")


def _mentions_attention(instr: Instruction) -> bool:
    op_name = instr.op_name.lower()
    return any(w in op_name for w in ATTENTION_WORDS)


def _custom_call(instr: Instruction) -> str:
    by_rule = rules.category(calls.to_desc(instr).opcode)   # a splash kernel: fused attention
    if by_rule != OTHER:
        return by_rule
    target = str(instr.attrs.get("custom_call_target", "")).lower()
    return next((cat for key, cat in CUSTOM_CALL_CATEGORY.items() if key in target), OTHER)


def _fusion(module: Module, instr: Instruction) -> str:
    if tpu.chain_role(module, instr) == "done":
        return COLLECTIVE
    # a chained TPU collective's copy in a continuation is the start's transfer (harness.hlo.tpu)
    inner = [i for i in fused_instructions(module, instr) if not tpu.in_flight(module, instr, i)]
    opcodes = {i.opcode for i in inner}
    if "exponential" in opcodes and opcodes & {"dot", "convolution"}:
        return ATTENTION
    arrays = [i for i in inner if any(s.elements > 1 for s in i.shapes)
              or any(s.elements > 1 for s in i.operand_leaves)]
    cats = {category(module, i) for i in (arrays or inner)}
    return next((c for c in FUSION_PRIORITY if c in cats), OTHER)


def _wrapped(module: Module, instr: Instruction) -> Instruction | None:
    """The instruction an ``async-start``/``-update``/``-done`` wraps (its computation's root)."""
    start, comp = instr, module.computation(instr.computation)
    for _ in range(64):  # done -> update* -> start; bounded against malformed self-references
        if start.opcode not in ("async-update", "async-done") or not start.operand_names:
            break
        start = comp.by_name[start.operand_names[0]]
    calls = start.called("calls") if start.opcode == "async-start" else ()
    return module.computation(calls[0]).root if calls else None


def category(module: Module, instr: Instruction, _depth: int = 0) -> str:
    """The category of one instruction (module docstring)."""
    if instr.opcode in _ASYNC_WRAPPERS:
        wrapped = _wrapped(module, instr)
        if wrapped is None or _depth > 8:
            return OTHER
        return category(module, wrapped, _depth + 1)
    if instr.opcode in ("fusion", "custom-call", "dot") and _mentions_attention(instr):
        return ATTENTION
    if instr.opcode in ("fusion", "fusion-start"):
        return _fusion(module, instr)
    if instr.opcode == "custom-call":
        return _custom_call(instr)
    return OPCODE_CATEGORY.get(instr.opcode, OTHER)
