"""An MoE's routed matmuls (``harness explain``; ``harness.explain.routed``): each expert matmul
priced at what it computes, the routed FLOPs beside it (book §5.4) and the waste."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import COUNT, FLOPS, OP, SOURCE_LINE, SOURCE_OP

FORM = term("form", "how the expert matmul covers the routed tokens: ragged, dense over every "
            "expert or padded capacity (the lines under the table say what each means)")
ROUTED_FLOPS = term("routed_flops", "the FLOPs of the routed token copies alone per step: "
                    "2·T·k·D·F an expert matmul (book §5.4)")
WASTE = term("waste", "computed FLOPs no routed token needed, over the computed: 1 − "
             "routed_flops / flops")
ROUTED = (OP, SOURCE_LINE, SOURCE_OP, FORM, COUNT, FLOPS, ROUTED_FLOPS, WASTE)
