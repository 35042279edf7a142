"""Memory (``harness memory``; ``harness.memory``): the three peaks side by side, what holds
each, and the buffers live at the compiled peak."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.ops import OP, OPCODE, SOURCE_LINE

MEMORY = "memory"                 # a run's meta key: the memory section (MemoryReport.to_dict)

# --- what holds the peak: one row per kind, the three sides side by side -----------------------
HOLDS = term("holds", "what the bytes hold: parameters, optimizer state, gradients, saved "
             "activations, KV cache, outputs (the new state), temporaries")
BOOK_BYTES = term("book_bytes", "per device, the book's model of it (training.md §6.3, "
                  "transformers.md §5.2, inference.md §5.3)")
COMPILED_BYTES = term("compiled_bytes", "per device, the buffers live at the compiled peak "
                      "that hold it (XLA's buffer assignment and schedule)")
MEASURED_BYTES = term("measured_bytes", "per device, the allocator's peak (memory_stats(); "
                      "none on CPU)")
DIFFERENCE = term("difference", "compiled_bytes / book_bytes - 1: how far the compiler's "
                  "figure is from the book's")
EXPLAINED = term("explained", "why the two differ, where it can be told: padding to tiles, "
                 "upcast copies, copies of the state, fragmentation")
HOLDS_TABLE = (HOLDS, BOOK_BYTES, COMPILED_BYTES, DIFFERENCE, EXPLAINED)

# --- the buffers live at the compiled peak, largest first ---------------------------------------
BUFFER = term("buffer", "the value XLA's buffer assignment names: its instruction and, for a "
              "tuple, the element {i}")
BUFFER_BYTES = term("size_bytes", "the buffer's size on one device, as allocated (padded)")
SHAPE = term("shape", "its type and per-device shape, with the layout's tiling where one pads")
SCOPE = term("scope", "the JAX operation that made it (the HLO's op_name), or the argument's "
             "path")
LIVE_FROM = term("live_from", "where in the schedule its life starts (XLA's HloLiveRange)")
LIVE_TO = term("live_to", "where in the schedule its life ends")
BUFFERS = (BUFFER, HOLDS, BUFFER_BYTES, SHAPE, OPCODE, OP, SCOPE, SOURCE_LINE,
           LIVE_FROM, LIVE_TO)

# --- live bytes over the step (the timeline) ----------------------------------------------------
POSITION = "position"             # a place in the flattened schedule (HloLiveRange's time)
LIVE_BYTES = term("live_bytes", "bytes of the buffers live at that point of the schedule")
TIMELINE = (POSITION, LIVE_BYTES)
