"""Multi-host runs on JAX's multi-controller runtime: one process per host (``run``), one
merged run stored by process 0 (``merge``)."""
