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
   fusion that computes attention by its data flow (``_attention_chain``): a dot whose result
   goes through a reduce-max (softmax's max subtraction) and an ``exponential`` into a second
   dot, softmax(Q K^T) V (`transformers.md`).
4. Otherwise a fusion takes the highest-priority category among the instructions inside it
   (``FUSION_PRIORITY``: collective > matmul > reduction > elementwise > copy > other),
   ignoring scalar index arithmetic when it also holds array work. A fusion that holds a dot is
   a matmul (`profiling.md`: a fusion holds at most one matmul plus the elementwise work fused
   around it), its activation included (SiLU, GELU, an ``exponential``: no second dot consumes
   it); a TPU fusion that ``calls=`` a collective is a collective.
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
# a grouped (routed) matmul kernel's name: libtpu's ``ragged-dot-*`` Mosaic kernel that
# jax.lax.ragged_dot compiles to, MaxText's megablox ``gmm`` / ``tgmm``
GROUPED_MATMUL_WORDS = ("ragged-dot", "ragged_dot", "gmm")

FUSION_PRIORITY = (COLLECTIVE, MATMUL, REDUCTION, ELEMENTWISE, COPY, OTHER)

_ASYNC_WRAPPERS = ("async-start", "async-update", "async-done")


def _mentions_attention(instr: Instruction) -> bool:
    op_name = instr.op_name.lower()
    return any(w in op_name for w in ATTENTION_WORDS)


def _custom_call(instr: Instruction) -> str:
    by_rule = rules.category(calls.to_desc(instr).opcode)   # a splash kernel: fused attention
    if by_rule != OTHER:
        return by_rule
    if any(w in calls.kernel_name(instr).lower() for w in GROUPED_MATMUL_WORDS):
        return MATMUL
    target = str(instr.attrs.get("custom_call_target", "")).lower()
    return next((cat for key, cat in CUSTOM_CALL_CATEGORY.items() if key in target), OTHER)


# The stages of attention's data flow, as bits of what has reached an instruction through its
# operands: a dot's result, then its reduce-max, then the exponential of that, then a second dot.
_DOT, _MAX, _EXP, _SECOND_DOT = 1, 2, 4, 8
_DOTS = ("dot", "convolution")


def _reduces_max(module: Module, instr: Instruction) -> bool:
    applied = instr.called("to_apply")
    root = module.computation(applied[0]).root if applied else None
    return root is not None and root.opcode == "maximum"


def _stages(module: Module, computation: str, seeds: tuple[int, ...], depth: int = 0) -> int:
    """The stages reached inside ``computation`` (its parameters reached by ``seeds``), nested
    fusions followed with their operands' stages."""
    reached: dict[str, int] = {}
    every = 0
    for i in module.computation(computation).instructions:
        s = 0
        for name in i.operand_names:
            s |= reached.get(name, 0)
        if i.opcode == "parameter":
            index = int(i.literal) if i.literal.isdigit() else -1
            s = seeds[index] if 0 <= index < len(seeds) else 0
        elif i.opcode == "fusion" and i.called("calls") and depth < 8:
            s |= _stages(module, i.called("calls")[0],
                         tuple(reached.get(n, 0) for n in i.operand_names), depth + 1)
        elif i.opcode in _DOTS:
            s |= _DOT | (_SECOND_DOT if s & _EXP else 0)
        elif i.opcode == "reduce" and s & _DOT and _reduces_max(module, i):
            s |= _MAX
        elif i.opcode == "exponential" and s & _MAX:
            s |= _EXP
        reached[i.name] = s
        every |= s
    return every


def _attention_chain(module: Module, instr: Instruction) -> bool:
    """Does the fusion compute softmax(Q K^T) V: a dot -> reduce-max -> exponential -> dot?"""
    calls = instr.called("calls")
    return bool(calls) and bool(_stages(module, calls[0], ()) & _SECOND_DOT)


def _fusion(module: Module, instr: Instruction) -> str:
    if tpu.chain_role(module, instr) == "done":
        return COLLECTIVE
    # a chained TPU collective's copy in a continuation is the start's transfer (harness.hlo.tpu)
    inner = [i for i in fused_instructions(module, instr) if not tpu.in_flight(module, instr, i)]
    if _attention_chain(module, instr):
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
