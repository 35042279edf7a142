"""Multi-host runs on JAX's multi-controller runtime: one process per host (``run``), one
merged run stored by process 0 (``store``, ``xspace``), a sweep across the job (``sweep``), and
a job rehearsed on one machine with local processes (``launch``).

Sits above ``runs`` and ``sweep``; nothing below imports it. Reading several hosts' traces of
one profile is the trace stage's (``harness.trace.hosts``)."""
