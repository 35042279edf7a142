"""Stage 6, analysis: the pure join of what was measured and what the roofline predicts.

Takes EVENTS (``harness.trace``), each program's parsed HLO (``harness.hlo``) and a chip
(``harness.chip``); gives the run's tables (``tables.derive``): OPS with efficiency and gap per
op and the summaries per category (``gaps``), each compilation that ran on its own
(``programs``), the STEP object (``harness.step``). Reads, writes and measures nothing.
"""
