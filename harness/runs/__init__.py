"""Runs: the paths that make a Run (the Run itself is ``harness.record``'s).

Takes a capture, a registered workload, a user's script or a trace from anywhere; gives a
``Run``. ``pipeline`` is that path (capture -> chip -> decode -> derive; the decode is the
trace stage's, ``harness.trace.decode``), ``workload`` takes a registered workload from build to
stored run (its report beside it), ``script`` a profiled script's trace to its run,
``explained`` a path's collectives for ``harness explain``, ``scratch`` the scratch space of
runs in progress, ``compile_cache`` JAX's persistent compilation cache.
"""
