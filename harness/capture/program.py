"""The user's function as the harness lowers, compiles and calls it.

A ``jax.jit`` or ``nnx.jit`` function is taken as it is: both lower with
``.lower(*args, **kwargs)``, static arguments included, and an NNX one lowers, compiles and
calls with its modules and optimizers, applying their updates to them. A plain function is
jitted here: with ``nnx.jit`` when Flax NNX objects are among its arguments (so that their
updates reach them, as in eager code), else ``jax.jit``. A compiled one
(``jax.jit(f).lower(...).compile()``, as the book calls its programs) is its own executable:
called with the arguments it was compiled for, never compiled again.

Steps call the program as the user's code does (``own``: the jitted function itself, which
runs the executable ``lowered.compile()`` made: jax keeps one cache for both), unless the
executable to trace is compiled with other options than jit's (GPU without command buffers,
``harness.capture.steps.TRACE_COMPILE_OPTIONS``): then the compiled executable itself, given
the arguments it takes (static keyword arguments left out). Static positional arguments leave
the harness no way to call it; jit's own executable is traced then, with a warning.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from harness.capture.arguments import has_graph_nodes, parameter_names
from harness.errors import one_line

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

log = logging.getLogger(__name__)


@dataclass
class Executable:
    """One compilation of the program: its lowering, the compiled executable (its HLO, cost
    and memory analyses), the compiler options it was compiled with ({}: XLA's defaults, jit's
    own executable) and ``call(args, kwargs)``, one step of it."""

    lowered: object
    compiled: object
    options: dict
    call: Callable


def _compile(lowered, options: dict):
    """``lowered.compile`` with ``options``; XLA's defaults (with a warning) if refused."""
    if not options:
        return lowered.compile(), {}
    try:
        return lowered.compile(compiler_options=options), options
    except Exception as e:  # noqa: BLE001 - an option this jaxlib does not know
        log.warning("compiling with %s failed (%s); tracing XLA's default executable",
                    options, one_line(e))
        return lowered.compile(), {}


def _dynamic_kwargs(lowered, args: tuple) -> set[str] | None:
    """The keyword arguments the compiled executable takes (jit drops static ones from its
    inputs); None when static positional arguments shift the positions (no public record
    says which)."""
    info = getattr(lowered, "args_info", None)
    if not (isinstance(info, tuple) and len(info) == 2 and isinstance(info[1], dict)):
        return None
    return set(info[1]) if len(info[0]) == len(args) else None


class Program:
    """The user's function, jitted (``fn`` itself when it lowers), named as the user wrote it
    (``name``, ``names``: its positional parameters, for notes)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        import jax

        self.compiled = fn if isinstance(fn, jax.stages.Compiled) else None
        if self.compiled is not None:
            self.jitted, self.name, self.names = fn, _compiled_name(fn), []
            return
        self.jitted = fn if hasattr(fn, "lower") else (
            sys.modules["flax.nnx"].jit(fn) if has_graph_nodes(args, kwargs) else jax.jit(fn))
        self.name = getattr(fn, "__name__", None) or type(fn).__name__
        self.names = parameter_names(fn)

    def own(self, args: tuple, kwargs: dict):
        """One step as the user's code runs it: the jitted function called."""
        return self.jitted(*args, **kwargs)

    def executable(self, args: tuple, kwargs: dict, options: dict) -> Executable:
        """Lower for ``args``/``kwargs`` and compile with ``options`` (see the module's
        docstring for which executable the steps call)."""
        if self.compiled is not None:  # compiled already: as it is, XLA's options its own
            return Executable(self.compiled, self.compiled, {}, self.own)
        lowered = self.jitted.lower(*args, **kwargs)
        keep = _dynamic_kwargs(lowered, tuple(args))
        if options and keep is None:
            log.warning("%s takes static positional arguments: tracing the executable jit "
                        "compiles (XLA's default options, not %s)", self.name, options)
            options = {}
        compiled, options = _compile(lowered, options)
        if not options:
            return Executable(lowered, compiled, {}, self.own)

        def call(a: tuple, kw: dict):
            return compiled(*a, **{k: v for k, v in kw.items() if k in keep})

        return Executable(lowered, compiled, options, call)


def _compiled_name(compiled) -> str:
    """A compiled program's name: its HLO module's (``jit_step``)."""
    first = compiled.as_text().split("\n", 1)[0]  # HloModule jit_step, is_scheduled=true, ...
    return first.split()[1].rstrip(",") if first.startswith("HloModule ") else "compiled"
