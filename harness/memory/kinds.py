"""What a buffer holds: the groups the book counts memory by (training.md §6.3, transformers.md
§5.2, inference.md §5.3), told from the compiled program alone.

An entry parameter is what its argument's path names (JAX writes it as the parameter's
``op_name``: ``params['layers']['w_q_DNH']``, ``opt_state['mu'][...]``, ``cache``): ``ARGUMENTS``.
A value made by the backward pass (``transpose(jvp(...))`` in its ``op_name``) whose shape is a
parameter's is a gradient; one made by the forward pass (``jvp(...)``) and still live is a saved
activation, named by its checkpoint name where the op carries one (``CHECKPOINT_NAMES``); the
rest (the optimizer's arithmetic, a layer's transients, the logits) are temporaries. Each rule
is a function in ``RULES``, tried in order; the first that answers names the kind.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

PARAMETERS, OPTIMIZER, GRADIENTS = "parameters", "optimizer", "gradients"
ACTIVATIONS, KV_CACHE, OUTPUTS = "activations", "kv_cache", "outputs"
TEMPORARIES, ARGUMENTS, CONSTANTS = "temporaries", "arguments", "constants"
KINDS = (PARAMETERS, OPTIMIZER, GRADIENTS, ACTIVATIONS, KV_CACHE, OUTPUTS, TEMPORARIES,
         ARGUMENTS, CONSTANTS)

# an argument's path root -> what it holds (the workloads' own argument names)
ARGUMENTS_BY_ROOT = {"params": PARAMETERS, "opt_state": OPTIMIZER, "cache": KV_CACHE,
                     "kv_cache": KV_CACHE}
# MaxText's checkpoint names (workloads.llama.remat.NAMES), as an op_name may carry them
CHECKPOINT_NAMES = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj",
                    "mlpwi_0", "mlpwi_1", "mlpwo", "context")
_ROOT = re.compile(r"^([A-Za-z_]\w*)")
_DIMS = re.compile(r"\[([\d,]*)\]")


def dims(shape: str) -> tuple[int, ...]:
    """``"bf16[2,16,4,8]{3,2,1,0}"`` -> (2, 16, 4, 8); () for a scalar or a tuple."""
    m = _DIMS.search(shape)
    return tuple(int(d) for d in m.group(1).split(",") if d) if m else ()


@dataclass
class Buffer:
    """What the rules look at: the value's allocation ``role`` (parameter, output, temporary,
    constant), the ``op_name`` of what made it (an argument's path for a parameter), its
    ``shape`` text, and ``origin``: the op_name it was carried from, where it is a loop's
    carried element."""

    role: str
    op_name: str
    shape: str
    origin: str = ""
    context: dict = field(default_factory=dict)


def _argument(b: Buffer) -> str | None:
    if b.role != "parameter":
        return None
    m = _ROOT.match(b.op_name)
    return ARGUMENTS_BY_ROOT.get(m.group(1) if m else "", ARGUMENTS)


def _constant(b: Buffer) -> str | None:
    return CONSTANTS if b.role == "constant" else None


def _backward(name: str) -> bool:
    return "transpose(" in name


def _forward(name: str) -> bool:
    return "jvp(" in name and not _backward(name)


def _gradient(b: Buffer) -> str | None:
    made = b.origin or b.op_name
    if _backward(made) and dims(b.shape) in b.context.get("parameter_dims", ()):
        return GRADIENTS
    return None


def _activation(b: Buffer) -> str | None:
    return ACTIVATIONS if _forward(b.origin or b.op_name) else None


def _kv_cache(b: Buffer) -> str | None:
    return KV_CACHE if "cache" in (b.origin or b.op_name).split("/")[-1] else None


RULES: tuple[Callable[[Buffer], str | None], ...] = (
    _argument, _constant, _gradient, _activation, _kv_cache)


def kind_of(b: Buffer) -> str:
    """The first rule's answer; a temporary where none answers."""
    return next((k for k in (rule(b) for rule in RULES) if k), TEMPORARIES)


def checkpoint_name(op_name: str) -> str:
    """The checkpoint name an activation's op carries, else its JAX operation's scope
    (``.../closed_call/btd,df->btf/dot_general`` -> ``btd,df->btf``)."""
    found = next((n for n in CHECKPOINT_NAMES if n in op_name), "")
    if found:
        return found
    parts = [p for p in op_name.split("/") if p and p not in _PLUMBING
             and not p.startswith(("jvp(", "jit(", "transpose("))]
    return parts[-2] if len(parts) >= 2 else (parts[-1] if parts else "layer scan residual")


_PLUMBING = ("while", "body", "closed_call", "cond")
