"""Runs: the one path from a program to a stored Run, and runs on disk.

Takes a capture, a registered workload or a trace from anywhere; gives a ``Run``. ``pipeline``
is that path (capture -> chip -> decode -> analyze; the decode is the trace stage's,
``harness.trace.decode``), ``workload`` takes a registered workload from build to stored run,
``run`` is the Run (what ran, its tables; save, load, render), ``store`` keeps run directories,
``compile_cache`` JAX's persistent compilation cache.
"""
