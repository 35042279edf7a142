"""The Flax NNX variable paths of a profiled script's ``nnx.jit`` programs (``harness profile``).

``nnx.jit`` flattens each graph node among a step's arguments (a module, an optimizer) into
its graph definition and a plain list of its variables' arrays (flax 0.12: ``_jit_split_fn``,
``flatten(..., with_paths=False)``), one flattening context for all of them, so that a
variable two arguments share is passed once, with the first. JAX then names the program's
entry parameters after that list: ``model.states[0][3]``, which says nothing of the model.

``NnxPaths.watch`` (called when the script imports ``flax.nnx``) wraps two methods of flax's
``nnx.jit``: each call of a jitted function (``JitWrapped.__call__``) is noted (the function and
its arguments: no work), and when JAX traces the function for a new compilation
(``JitFn.__call__``, run only then) the noted arguments' graph nodes are flattened again, in
the same order with one ``RefMap`` as ``nnx.jit`` does, with their paths: leaf ``k`` of node
``model``'s state is ``model.linear1.kernel``. Per program (``jit_update``): JAX's name of each
parameter -> its path, kept in the capture's meta as ``schema.ARGUMENT_PATHS``, which
``harness.explain`` reads (``harness.hlo.signature.user_name``). ``jax_names`` is that
naming on its own, which ``harness.analyze`` applies to the step it lowers
(``harness.capture.arguments.nnx_names``). Nothing the script sees changes; a flax whose
internals differ (a missing method, another state layout: the count of a node's leaves
differs from what ``nnx.jit`` passed) keeps JAX's names. Standard library only at import, as
``harness.capture.child``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import threading

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^\w.-]")  # what JAX replaces in a module's name (mlir.sanitize_name)


def jitted_name(fn) -> str:
    """The name JAX gives the program of jitted ``fn``: ``jit_<its name>``."""
    while isinstance(fn, functools.partial) and not hasattr(fn, "__name__"):
        fn = fn.func
    return _UNSAFE.sub("_", f"jit_{getattr(fn, '__name__', '<unnamed function>')}")


def path_text(parts: tuple) -> str:
    """An NNX path as code reads it: ``('layers', 0, 'kernel')`` -> ``.layers[0].kernel``."""
    return "".join(f".{p}" if isinstance(p, str) and p.isidentifier() else f"[{p!r}]"
                   for p in parts)


def bound_arguments(fn, args: tuple, kwargs: dict) -> list[tuple[str, object]]:
    """The arguments by the names JAX gives them (``jax._src.api_util``): the positional ones
    by their parameters' names, then the keyword ones sorted (those ``**kwargs`` takes as
    ``kwargs['name']``); ``args`` as one tuple where they do not fit the signature."""
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [("args", tuple(args))] + sorted((f"kwargs[{k!r}]", v) for k, v in kwargs.items())
    var_kw = next((n for n, p in sig.parameters.items() if p.kind == p.VAR_KEYWORD), None)
    positional = [(n, v) for n, v in bound.arguments.items() if n not in kwargs and n != var_kw]
    keyword = [(k if k in bound.arguments else f"{var_kw}[{k!r}]", v)
               for k, v in sorted(kwargs.items())]
    return positional + keyword


class NnxPaths:
    """JAX's name -> NNX path of each parameter of the ``nnx.jit`` programs traced since
    ``watch``, per program."""

    def __init__(self):
        self.programs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._calls = threading.local()  # the jitted calls under way in this thread

    def snapshot(self) -> dict[str, dict[str, str]]:
        """Per program, each parameter named both ways ({} for none); a name two functions
        of one name map apart is left out."""
        with self._lock:
            found = {p: {k: v for k, v in names.items() if v}
                     for p, names in self.programs.items()}
        return {p: names for p, names in found.items() if names}

    def watch(self, nnx) -> None:
        """Wrap ``nnx.jit``'s call and trace (``nnx``: ``flax.nnx``, just imported); a flax
        without them is left as it is."""
        compilation = sys.modules.get("flax.nnx.transforms.compilation")
        outer = getattr(compilation, "JitWrapped", None)
        inner = getattr(compilation, "JitFn", None)
        if outer is None or inner is None or _flatten_flags(nnx) is None:
            log.debug("flax.nnx without the jit internals known: JAX's parameter names kept")
            return
        self._wrap_call(outer)
        self._wrap_trace(inner, functools.partial(self._record, nnx))

    def _stack(self) -> list:
        if not hasattr(self._calls, "stack"):
            self._calls.stack = []
        return self._calls.stack

    def _wrap_call(self, cls) -> None:
        call = cls.__call__

        @functools.wraps(call)
        def noted(jitted, *args, **kwargs):
            stack = self._stack()
            stack.append((jitted, args, kwargs))
            try:
                return call(jitted, *args, **kwargs)
            finally:
                stack.pop()

        cls.__call__ = noted

    def _wrap_trace(self, cls, record) -> None:
        trace = cls.__call__

        @functools.wraps(trace)
        def traced(fn, *pure_args, **pure_kwargs):
            stack = self._stack()
            if stack and stack[-1][0] is getattr(fn, "ctxtag", None):
                try:
                    record(fn, stack[-1][1], stack[-1][2], (pure_args, pure_kwargs))
                except Exception as e:  # noqa: BLE001 - never the script's failure
                    log.debug("NNX paths not recorded: %s", e)
            return trace(fn, *pure_args, **pure_kwargs)

        cls.__call__ = traced

    def _record(self, nnx, fn, args: tuple, kwargs: dict, pure) -> None:
        """Name the parameters of ``fn``'s program being traced (``pure``: what ``nnx.jit``
        passed it, each graph node as ``NodeStates``) after its call's ``args``' nodes."""
        found = jax_names(nnx, fn, args, kwargs, pure)
        if found is not None:
            self._add(jitted_name(fn), found)

    def _add(self, program: str, found: dict[str, str]) -> None:
        with self._lock:
            names = self.programs.setdefault(program, {})
            for k, v in found.items():
                names[k] = v if names.get(k, v) == v else ""  # two functions disagree: neither


def _flatten_flags(nnx) -> dict | None:
    """The keywords that make ``nnx.graph.flatten`` give paths as ``nnx.jit`` flattens (one
    ``RefMap`` for all arguments); None for a flax without the internals ``jax_names`` reads."""
    graph = getattr(nnx, "graph", None)
    needed = (getattr(sys.modules.get("flax.nnx.extract"), "NodeStates", None),
              getattr(graph, "flatten", None), getattr(graph, "RefMap", None),
              getattr(graph, "is_graph_node", None), getattr(nnx, "Variable", None))
    if None in needed:
        return None
    try:
        params = inspect.signature(graph.flatten).parameters
    except (TypeError, ValueError):
        return None
    if not {"with_paths", "ref_index"} <= params.keys():
        return None
    return {"with_paths": True, **({"graph": True} if "graph" in params else {})}


def jax_names(nnx, fn, args: tuple, kwargs: dict, pure) -> dict[str, str] | None:
    """JAX's name of each parameter an ``nnx.jit`` program of ``fn(*args, **kwargs)`` takes
    for a graph node's array -> its NNX path (``model.states[0][3]`` -> ``model.linear1.kernel``):
    the arguments' nodes flattened in order with one ``RefMap``, as ``nnx.jit`` does. ``pure``:
    what ``nnx.jit`` passed JAX for them (each node as ``NodeStates``, whose arrays may be
    ``ArgInfo``s: a lowering's ``args_info``); a node whose count of arrays differs is left
    unnamed, and None where the nodes do not pair with it (or ``nnx`` lacks the internals)."""
    import jax

    flags, graph = _flatten_flags(nnx), getattr(nnx, "graph", None)
    if flags is None:
        return None
    states = sys.modules["flax.nnx.extract"].NodeStates
    is_node = lambda x: graph.is_graph_node(x) or isinstance(x, nnx.Variable)
    passed = [len(s.states[0]) if len(s.states) == 1 and isinstance(s.states[0], list)
              else None  # a state split by filters (in_shardings) is named otherwise
              for s in jax.tree.leaves(pure, is_leaf=lambda x: isinstance(x, states))
              if isinstance(s, states)]
    refs, found, n = graph.RefMap(), {}, 0
    for name, value in bound_arguments(fn, args, kwargs):
        for keys, node in jax.tree_util.tree_flatten_with_path(value, is_leaf=is_node)[0]:
            if not is_node(node):
                continue
            paths = _paths(graph.flatten(node, ref_index=refs, **flags)[1])
            where = name + jax.tree_util.keystr(keys)
            if n < len(passed) and passed[n] == len(paths):
                found.update({f"{where}.states[0][{k}]": where + path_text(tuple(p))
                              for k, p in enumerate(paths)})
            n += 1
    return found if n == len(passed) else None


def _paths(flat) -> list[tuple]:
    """The paths of a flattened state: a ``FlatState``'s (flax 0.11+), else its (path, leaf)
    pairs'."""
    paths = getattr(flat, "paths", None)
    return list(paths) if paths is not None else [tuple(p) for p, _ in flat]
