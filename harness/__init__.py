"""scaling-harness: capture -> parse -> predict -> compare -> report -> store.

Stage functions are importable without importing jax; jax is imported when a stage needs it.
"""
__version__ = "0.1.0"
