"""Where XLA op executions live in an XSpace, one entry per backend layout (`profiling.md`).

Each layout turns an XSpace into plain column lists (``Columns``); ``harness.trace.load`` makes the
DataFrame. Steps are attributed here: ``-1`` marks an execution outside every measured step.

- CPU: plane ``/host:CPU``; op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal``,
  ``run_id``. Dispatch is asynchronous, so ops are tied to steps through ``run_id``: the host-side
  ``CommonPjRtLoadedExecutable::Execute`` event inside each step annotation carries it.
- TPU: planes ``/device:TPU:<n>``, line ``XLA Ops`` (the op is the event's display name, its
  time the stat ``device_duration_ps``), modules from the ``XLA Modules`` line, steps from the
  ``Steps`` line; an async pair's time is its ``-done``'s wait (``harness.trace.tpu``).
- GPU: planes ``/device:GPU:<n>``, kernel events on per-stream lines with ``hlo_op`` /
  ``hlo_module`` stats; consecutive kernels of one HLO op fold into one execution whose duration
  is the sum of its kernels'. Steps come from a ``Steps`` line or the host step annotations.
  Kernels inside CUDA graphs are attributed to HLO ops from the module's HLO (``trace.gpu``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.trace import cpu as layout_cpu
from harness.trace import gpu as layout_gpu
from harness.trace import tpu as layout_tpu
from harness.trace.planes import Columns
from harness.trace.space import Space

__all__ = ["LAYOUTS", "Layout", "Columns"]


@dataclass(frozen=True)
class Layout:
    detect: Callable[[Space], bool]
    extract: Callable[..., Columns]  # (space) or, with uses_hlo, (space, schedule_of)
    uses_hlo: bool = False  # the layout uses the program's schedule (GPU: CUDA graphs)
    shares_cores: bool = False  # its devices are threads on the host's cores (measure.shares)
    # the half of an async -start/-done pair its trace gives the pair's time to (harness.hlo.cost)
    async_time_on: str = "start"
    # starts the decode in worker processes, ahead of ``extract`` (``harness.trace.parallel``)
    start: Callable[[Space], None] | None = None


# Order matters: device planes first; the CPU layout also matches the host plane of GPU runs.
LAYOUTS: dict[str, Layout] = {
    "tpu": Layout(layout_tpu.detect, layout_tpu.extract, async_time_on=layout_tpu.ASYNC_TIME_ON,
                  start=layout_tpu.start),
    "gpu": Layout(layout_gpu.detect, layout_gpu.extract, uses_hlo=True, start=layout_gpu.start),
    "cpu": Layout(layout_cpu.detect, layout_cpu.extract, shares_cores=True,
                  start=layout_cpu.start),
}
