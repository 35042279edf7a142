"""Stage 2: a profiler trace (``*.xplane.pb``) -> EVENTS, one row per device op execution.

``space`` opens a trace a piece at a time (planes' metadata read, lines left on disk),
``wire`` reads a line as columns with numpy (``varint``, ``stats``; ``xplane`` declares the
protobuf schema), ``parallel`` shares lines, planes or hosts among worker processes, ``planes``
holds the lookups the layouts share, ``cpu``, ``gpu`` and ``tpu`` read where each backend puts
its ops (``graphs`` attributes the kernels of CUDA graphs to HLO ops), ``hlo_proto`` reads the
compiled HLO a trace carries, ``device`` what its device planes say about the hardware,
``load`` picks the layout and builds the table.
"""
from harness.trace.load import TraceEvents, load_events, read_events

__all__ = ["TraceEvents", "load_events", "read_events"]
