"""The matmul probes' kernels: which kernel XLA:CPU compiled each probe to, read from its HLO
(``harness.hlo.kernels``), and a probe timed on that kernel's ops (``measure_kernel``)."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from harness.chip.probes import BUILDERS, Program, Sample, measure_program, outside_user_mesh
from predictions import dtypes


class Kernel(NamedTuple):
    """The ops a matmul program's time is read from: their HLO names, kernel and dtype."""

    ops: tuple[str, ...]
    kernel: str
    dtype: str  # the book's peak column (fp32 for a bf16 matmul XLA:CPU runs on f32 copies)


def kernel_of(prog: Program) -> Kernel:
    """The heaviest ops of a program's compiled HLO (most FLOPs in its entry computation: the
    chain's matmuls), and the kernel that runs them (``harness.hlo.kernels``)."""
    from harness.hlo import cost, kernels, parse_module

    module = parse_module(prog.fn.lower(*prog.args).compile().as_text())
    flops = {i.name: cost.instruction_cost(i, module).flops for i in module.entry.instructions}
    op = module.instruction(max(flops, key=flops.get))
    name = kernels.kernel(op, module)
    ops = tuple(i.name for i in module.entry.instructions
                if flops[i.name] == flops[op.name] and kernels.kernel(i, module) == name)
    dtype = dtypes.peak_column(cost.compute_dtype(op, module)) or "fp32"
    return Kernel(ops, name, dtype)


def measure_kernel(kind, scope, dtype, size, devices, sizes, seen: set) -> Sample | None:
    """A matmul program's sample, timed on the op its kernel runs (``kernel_of``); None when a
    sample of that kernel, compute dtype, size and scope is in ``seen`` already (XLA:CPU runs
    a bf16 matmul as converts and an f32 kernel where the host has no bf16 one)."""
    with outside_user_mesh():
        prog = BUILDERS[kind](devices, dtype, size, sizes.chain)
        k = kernel_of(prog)
        if (k.kernel, k.dtype, size, scope) in seen:
            return None
        seen.add((k.kernel, k.dtype, size, scope))
        sample = measure_program(prog, kind, scope, dtype, size, "peak", sizes, k.ops)
        return dataclasses.replace(sample, dtype=k.dtype, kernel=k.kernel)
