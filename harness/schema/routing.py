"""An MoE run's routing section (``harness.step.routing``, shown by ``harness.report.routing``):
the run's meta key and the figures a reader sees, each with its meaning (issue 54 part 3)."""
from __future__ import annotations

from harness.schema.glossary import term

ROUTING = "routing"  # the run's meta key: the section's figures (harness.step.routing.of_built)
TOKENS_PER_EXPERT = term("tokens_per_expert", "token-choices routed to each expert in a layer "
                         "(before any drop), over the global batch")
IMBALANCE = term("imbalance", "the busiest expert's token-choices over the mean tokens·k/E "
                 "(1 = balanced; book §5.4)")
DROP_SHARE = term("drop_share", "token-choices dropped past their expert's capacity, over "
                  "tokens·k (GShard's capacity C = ceil(factor·n·k/E) per group of n tokens)")
ROUTING_KEYS = (TOKENS_PER_EXPERT, IMBALANCE, DROP_SHARE)  # a layer's figures
