"""Stage 2: a profiler trace (``*.xplane.pb``) -> EVENTS, one row per device op execution.

``xplane`` decodes the protobuf, ``planes`` holds the lookups the layouts share, ``cpu``,
``gpu`` and ``tpu`` read where each backend puts its ops (``gpu`` also attributes the kernels of
CUDA graphs to HLO ops), ``hlo_proto`` reads the compiled HLO a trace carries, ``device`` what
its device planes say about the hardware, ``load`` picks the layout and builds the table.
"""
from harness.trace.load import TraceEvents, load_events, read_events

__all__ = ["TraceEvents", "load_events", "read_events"]
