"""Which kernel runs an op's matmul, read from the compiled HLO, and which rate prices the op.

XLA:CPU runs matmuls through kernels several times apart in speed: its own ``dot`` emitter,
library fusions (``ynn_fusion``, ``xnn_fusion``: YNNPACK/XNNPACK, named in the fusion's
``backend_config``), library calls (oneDNN's ``__onednn$matmul`` custom calls, where enabled).
``kernel`` names an instruction's kernel by the first field of ``FIELDS`` that names one, so a
kernel kind a newer XLA emits shows up under its own name, calibrated or not. ``price`` gives an
op's compute rate on a chip: its kernel's measured rate for its size where the chip has one
(``predictions.roofline.kernel_rate``), else the chip's generic peak, saying so.
"""
from __future__ import annotations

from collections.abc import Callable

from harness.hlo import calls
from harness.hlo.category import MATMUL, category
from harness.hlo.ir import Instruction, Module
from harness.hlo.walk import fused_instructions
from harness.units import fmt_bytes
from predictions import dtypes, roofline
from predictions.rules import CONV_VIEWS

_MATMULS = ("dot", "convolution")
LIBRARY_MATMULS = frozenset({"dot", *CONV_VIEWS})


def _library_fusion(instr: Instruction, module: Module) -> str:
    """A library fusion's kind from its backend_config: ``{"fusion_config": {"kind":
    "__ynn_fusion"}}`` -> ``ynn_fusion``."""
    config = instr.backend_config().get("fusion_config")
    kind = config.get("kind", "") if isinstance(config, dict) else ""
    return str(kind).strip("_") if instr.opcode == "fusion" else ""


def _library_call(instr: Instruction, module: Module) -> str:
    """A library matmul call by its target: ``__onednn$matmul`` -> ``onednn$matmul``."""
    if instr.opcode != "custom-call" or category(module, instr) != MATMUL:
        return ""
    return calls.target(instr).strip("_")


def _emitted(instr: Instruction, module: Module) -> str:
    """XLA's own emitter: a ``dot`` or ``convolution``, alone or inside a loop/output fusion."""
    if instr.opcode in _MATMULS:
        return instr.opcode
    if instr.opcode == "fusion":
        inner = [i.opcode for i in fused_instructions(module, instr) if i.opcode in _MATMULS]
        return inner[0] if inner else ""
    return ""


# The HLO fields that name an op's matmul kernel, first match wins: a library fusion's kind
# (backend_config), a library call's target, XLA's emitted opcode.
FIELDS: dict[str, Callable[[Instruction, Module], str]] = {
    "fusion_config": _library_fusion,
    "custom_call_target": _library_call,
    "opcode": _emitted,
}


def kernel(instr: Instruction, module: Module) -> str:
    """The name of the kernel that runs ``instr``'s matmul; "" when it does none."""
    for name_of in FIELDS.values():
        name = name_of(instr, module)
        if name:
            return name
    return ""


GENERIC = "generic"  # a rate label: the chip's one peak, not a kernel's own


def price(chip, kernel_name: str, dtype: str, flops: float) -> tuple[float | None, str]:
    """(C, label): the measured rate of ``kernel_name`` for an execution of ``flops`` FLOPs
    where ``chip`` has one; otherwise (None: the chip's peak) and a label that says the generic
    rate priced it, naming a kernel that was not calibrated."""
    column = dtypes.peak_column(dtype) or str(dtype).lower()
    rate = roofline.kernel_rate(chip, kernel_name, dtype, flops) if kernel_name else None
    if rate:
        return rate, f"{kernel_name} {column}"
    if kernel_name and getattr(chip, "kernel_flops", ()):
        return None, f"{GENERIC} {column} ({kernel_name} not calibrated)"
    return None, f"{GENERIC} {column}"


def memory_label(chip, nbytes: float) -> str:
    """Which bandwidth moves ``nbytes`` (``predictions.roofline.memory_bandwidth``): the
    smallest memory tier they fit in, else main memory."""
    for capacity, _ in getattr(chip, "memory_tiers", ()) or ():
        if nbytes <= capacity:
            return f"memory <= {fmt_bytes(capacity, 0)}"
    return "memory"


def rate_label(bound: str, compute: str, memory: str, software: bool) -> str:
    """The rate behind an op's roofline time, by the term that sets it (``schema.RATE``)."""
    labels = {"compute": "convert (software)" if software else compute, "memory": memory,
              "comm": "collective", roofline.OVERHEAD: "per-op overhead"}
    return labels.get(bound, "")
