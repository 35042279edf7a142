"""Where XLA op executions live in an XSpace, one entry per trace format (`profiling.md`).

Each format turns an XSpace into plain column lists (``Columns``); ``harness.trace.load`` makes the
DataFrame. Steps are attributed here: ``-1`` marks an execution outside every measured step.

- CPU: plane ``/host:CPU``; op events carry stats ``hlo_op``, ``hlo_module``, ``device_ordinal``,
  ``run_id``. Dispatch is asynchronous, so ops are tied to steps through ``run_id``: the host-side
  ``CommonPjRtLoadedExecutable::Execute`` event inside each step annotation carries it.
- TPU: planes ``/device:TPU:<n>``, line ``XLA Ops`` (the op is the event's display name, its
  time the stat ``device_duration_ps``), modules from the ``XLA Modules`` line, steps from the
  ``Steps`` line; an async pair's time is its ``-done``'s wait (``harness.trace.tpu``).
- TPU, Chrome JSON (``tpu-json``): jax.profiler's ``*.trace.json.gz`` where no XSpace is at
  hand: the same lines as threads of ``/device:TPU:<n>`` processes (``harness.trace.chrome``).
- GPU: planes ``/device:GPU:<n>``, kernel events on per-stream lines with ``hlo_op`` /
  ``hlo_module`` stats; consecutive kernels of one HLO op fold into one execution whose duration
  is the sum of its kernels'. Steps come from a ``Steps`` line or the host step annotations.
  Kernels inside CUDA graphs are attributed to HLO ops from the module's HLO (``trace.gpu``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.trace import chrome, cpu, gpu, tpu
from harness.trace.planes import Columns
from harness.trace.space import Space

__all__ = ["FORMATS", "Format", "Columns"]


@dataclass(frozen=True)
class Format:
    """How one backend's traces hold their ops: recognised by ``detect``, read by ``extract``."""

    detect: Callable[[Space], bool]
    extract: Callable[..., Columns]  # (space) or, with uses_hlo, (space, schedule_of)
    uses_hlo: bool = False  # the format needs the program's schedule (GPU: CUDA graphs)
    shares_cores: bool = False  # its devices are threads on the host's cores (measure.shares)
    # the half of an async -start/-done pair its trace gives the pair's time to (harness.hlo.cost)
    async_time_on: str = "start"
    # starts the decode in worker processes, ahead of ``extract`` (``harness.trace.parallel``)
    start: Callable[[Space], None] | None = None


# Order matters: device planes first; the CPU format also matches the host plane of GPU runs.
# A Chrome JSON trace (``chrome.ChromeTrace``) has no planes: only its own format matches it.
FORMATS: dict[str, Format] = {
    "tpu-json": Format(chrome.detect, chrome.extract, async_time_on=tpu.ASYNC_TIME_ON),
    "tpu": Format(tpu.detect, tpu.extract, async_time_on=tpu.ASYNC_TIME_ON, start=tpu.start),
    "gpu": Format(gpu.detect, gpu.extract, uses_hlo=True, start=gpu.start),
    "cpu": Format(cpu.detect, cpu.extract, shares_cores=True, start=cpu.start),
}
