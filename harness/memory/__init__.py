"""Memory: the peak predicted and measured, and what holds it (issue 56).

Three peaks per device side by side (``peaks``): measured (the allocator's; none on CPU),
compiled (``memory_analysis()`` and the buffers live at XLA's peak) and the book's model
(``Workload.memory``); the buffers live at the compiled peak, each with its size, shape, the
HLO op and JAX operation that make it, its source line and what it holds (``buffers``,
``kinds``), read from XLA's own dump of the compiled program (``dump``, ``assignment``: one
reader for the CPU, GPU and TPU compilers' text); live bytes over the step; one object,
``report.MemoryReport``, rendered by ``render``.
"""
from harness.memory.report import MemoryReport, of_dump, of_workload  # noqa: F401
