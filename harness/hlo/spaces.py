"""Memory spaces: where an HLO value lives, read from the ``S(n)`` of its layout.

``harness.hlo.line`` keeps each result leaf's memory space (``Instruction.memory_spaces``):
``f32[5,1024]{1,0:T(8,128)S(5)}`` is in space 5, host memory (XLA's
``Layout::kHostMemorySpace``, ``xla/layout.h``); ``S(1)`` is the chip's fast memory (VMEM on
TPU, `profiling.md`); no ``S(n)`` is HBM. A copy whose source or destination is in host memory
(``copy``, or the ``copy-start`` of an async pair, whose result tuple holds the destination,
the source and a context; or a slice, sync or async, by which libtpu moves offloaded
activations) moves its bytes over the host link, PCIe, rather than HBM to HBM:
``on_host_link`` renames its description to ``predictions.rules.HOST_COPY``, which is priced at
the chip's host-link bandwidth (roofline.md: bytes / W of the link they cross; W_pcie per chip
from tpus.md).
"""
from __future__ import annotations

from dataclasses import replace

from harness.hlo.ir import Instruction, Module
from predictions.rules import ASYNC_SLICES, HOST_COPY, OpDesc

HOST = 5  # xla/layout.h: Layout::kHostMemorySpace
# what may move data between memory spaces: copies, and the slices libtpu writes saved
# activations to host memory with and reads them back by (offload remat policies)
COPIES = frozenset({"copy", "copy-start",
                    *(f"{s}{a}" for s in ASYNC_SLICES for a in ("", "-start"))})


def operand_spaces(instr: Instruction, module: Module) -> tuple[int, ...]:
    """The memory spaces of every leaf of every operand (each looked up in its computation)."""
    comp = module.computation(instr.computation)
    return tuple(s for name in instr.operand_names if name in comp.by_name
                 for s in comp.by_name[name].memory_spaces)


def crosses_host(instr: Instruction, module: Module) -> bool:
    """True for a copy from or to host memory."""
    return instr.opcode in COPIES and (HOST in instr.memory_spaces
                                       or HOST in operand_spaces(instr, module))


def on_host_link(desc: OpDesc, instr: Instruction, module: Module) -> OpDesc:
    """``desc``, as a ``HOST_COPY`` of the bytes that move when ``instr`` copies from or to host
    memory: a dynamic-update-slice's update (operand 1; the rest of the buffer stays put),
    any other copy's or slice's result."""
    if not crosses_host(instr, module):
        return desc
    moved = desc.operands[1:2] if desc.opcode == "dynamic-update-slice" else desc.results
    return replace(desc, opcode=HOST_COPY, results=tuple(moved))
