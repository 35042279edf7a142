"""Stage 3, measure: EVENTS -> OPS[measured].

Takes the trace's EVENTS (one row per device op execution, ``harness.trace``); gives per
(program, program id, op) executions per step and time per step (``ops``), on a host whose
devices share cores each op's share of the host's time (``shares``), when each device arrived at
a collective and how long it waited for its group there (``arrivals``), a multi-host job's per-host
columns (``per_host``), which compilations ran and how one is named (``programs``);
``grouping`` numbers groups of millions of rows as pandas would.
"""
