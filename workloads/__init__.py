"""Plain JAX programs to measure: sharded matmuls, collectives, LLaMA-3 train/prefill/decode.

Each family module exposes a frozen ``Config`` dataclass (book letters), presets (``tiny`` and
named sizes) and ``build(cfg, mesh, abstract=False) -> (fn, args)``; ``WORKLOADS`` registers them.

    cfg = make_config("matmul", "tiny", {"case": "allreduce", "dtype": "bf16"})
    fn, args = get("matmul").build(cfg, mesh.make_mesh("4x2"))
    fn(*args)

Importing this package imports jax: set ``XLA_FLAGS`` (virtual CPU devices) before importing it.
This package never imports ``harness``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads import collectives, matmul
from workloads.base import Workload, WorkloadError, check_choice, config_dict, replace_config
from workloads.llama import generate as _llama_generate
from workloads.llama import serve as _llama_serve
from workloads.llama import train as _llama_train

WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    matmul.WORKLOAD,
    collectives.WORKLOAD,
    _llama_train.WORKLOAD,
    _llama_serve.PREFILL,
    _llama_serve.DECODE,
    _llama_generate.WORKLOAD,
)}

__all__ = ["WORKLOADS", "Workload", "WorkloadError", "get", "make_config", "config_dict"]


def get(name: str) -> Workload:
    """The registered workload ``name``; an unknown name raises ``WorkloadError`` listing all."""
    check_choice("workload", name, WORKLOADS)
    return WORKLOADS[name]


def make_config(name: str, preset: str = "tiny",
                overrides: Mapping[str, Any] | None = None) -> Any:
    """The ``preset`` config of workload ``name`` with ``overrides`` applied.

    Override values may be strings as typed on the command line (``"128"``, ``"bf16"``,
    ``"true"``, ``"fsdp_tp"``); they are coerced to each field's type. Unknown keys raise
    ``WorkloadError`` naming the valid fields.
    """
    workload = get(name)
    check_choice(f"{name} preset", preset, workload.presets)
    return replace_config(workload.presets[preset], overrides)
