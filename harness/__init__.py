"""scaling-harness: capture -> parse -> predict -> compare -> report -> store.

Stage functions are importable without importing jax; jax is imported when a stage needs it.
"""
__version__ = "0.1.0"


def analyze(fn, *args, **kwargs):
    """Capture any jitted ``fn(*args)`` and report it per op against the roofline.

    See :func:`harness.analysis.analyze`; returns an :class:`harness.analysis.Analysis`.
    """
    from harness.analysis import analyze as _analyze

    return _analyze(fn, *args, **kwargs)


def analyze_trace(path, **kwargs):
    """Report a profiler trace (any ``jax.profiler`` capture) per op against the roofline.

    See :func:`harness.analysis.analyze_trace`; returns an :class:`harness.analysis.Analysis`.
    """
    from harness.analysis import analyze_trace as _analyze_trace

    return _analyze_trace(path, **kwargs)
