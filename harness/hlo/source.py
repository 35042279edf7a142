"""Where an HLO instruction came from: the user's source line and the JAX operation.

XLA prints each instruction's ``metadata={op_name="jit(f)/dot_general" stack_frame_id=4}``
and, before the computations, the module's source blocks::

    FileNames       1 "/home/me/model.py"
    FunctionNames   1 "mlp"
    FileLocations   1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 ...}
    StackFrames     1 {file_location_id=1 parent_frame_id=1}

A stack frame names a file location and its caller. The printer writes each parent id one
above the frame it names (0 there, "no caller", is printed 1, so the outermost frame names
itself); a block whose every parent is below its own frame's id is read as printed.
``source_line`` walks from the instruction's frame to its callers and keeps the innermost
frame in the user's own code (not in jax, jaxlib, site-packages or the harness itself), the
innermost of all where every frame is library code. Older metadata prints
``source_file=... source_line=...`` instead; that is used where there is no stack frame.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.hlo.ir import Instruction, Module

_ITEM_RE = re.compile(r"(\w+)=(-?\d+)")
_QUOTED_RE = re.compile(r'^(\d+)\s+"((?:[^"\\]|\\.)*)"$')
_KEYED_RE = re.compile(r"^(\d+)\s+\{(.*)\}$")
_FRAME_ID_RE = re.compile(r"\bstack_frame_id=(\d+)")
_SOURCE_FILE_RE = re.compile(r'\bsource_file="((?:[^"\\]|\\.)*)"')
_SOURCE_LINE_RE = re.compile(r"\bsource_line=(\d+)")
_HARNESS_DIR = str(Path(__file__).resolve().parents[1])
# Path parts of library code: a frame there is not where the user wrote the operation.
LIBRARY_PARTS = ("/jax/", "/jaxlib/", "/site-packages/", "/dist-packages/", "/flax/",
                 "/optax/", "/equinox/")


@dataclass(frozen=True)
class Frame:
    """One stack frame: ``file``, ``function``, ``line`` (1-based) and its caller's frame id
    (0: none)."""

    file: str
    function: str
    line: int
    parent: int


def _names(lines: list[str]) -> dict[int, str]:
    out = {}
    for line in lines:
        m = _QUOTED_RE.match(line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def _keyed(lines: list[str]) -> dict[int, dict[str, int]]:
    out = {}
    for line in lines:
        m = _KEYED_RE.match(line)
        if m:
            out[int(m.group(1))] = {k: int(v) for k, v in _ITEM_RE.findall(m.group(2))}
    return out


def frames(module: Module) -> dict[int, Frame]:
    """The module's stack frames by id, read from its source blocks once ({} without them)."""
    if module.derived.frames or not module.blocks.get("StackFrames"):
        return module.derived.frames
    b = module.blocks
    files, functions = _names(b.get("FileNames", [])), _names(b.get("FunctionNames", []))
    locations, stack = _keyed(b.get("FileLocations", [])), _keyed(b.get("StackFrames", []))
    # printed one above the frame they name where any frame names itself or a later frame
    shift = 1 if any(f.get("parent_frame_id", 0) >= i for i, f in stack.items()) else 0
    out = module.derived.frames
    for i, f in stack.items():
        loc = locations.get(f.get("file_location_id", 0), {})
        parent = max(f.get("parent_frame_id", 0) - shift, 0)
        out[i] = Frame(files.get(loc.get("file_name_id", 0), "?"),
                       functions.get(loc.get("function_name_id", 0), "?"),
                       loc.get("line", 0), parent if parent != i else 0)
    return out


def is_user_file(path: str) -> bool:
    """A file the user wrote: not library code, not the harness's own modules."""
    return not any(p in path for p in LIBRARY_PARTS) and not path.startswith(_HARNESS_DIR)


def call_stack(instr: Instruction, module: Module) -> list[Frame]:
    """The instruction's frames, innermost first ([] where its metadata names none)."""
    m = _FRAME_ID_RE.search(instr.attrs.get("metadata", ""))
    table = frames(module) if m else {}
    out, seen, i = [], set(), int(m.group(1)) if m else 0
    while i in table and i not in seen:
        seen.add(i)
        out.append(table[i])
        i = table[i].parent
    return out


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it, else as printed."""
    try:
        return _shown_from(path, os.getcwd())
    except OSError:
        return path


@functools.lru_cache(maxsize=1024)
def _shown_from(path: str, cwd: str) -> str:
    """``shown_path`` from the directory ``cwd``: resolved once per (path, directory), as a
    module's thousands of instructions name a few files."""
    try:
        return str(Path(path).resolve().relative_to(Path(cwd).resolve()))
    except (ValueError, OSError):
        return path


def source_line(instr: Instruction, module: Module) -> str:
    """``file:line`` of the innermost user frame that made the instruction ("" if unknown)."""
    stack = call_stack(instr, module)
    if stack:
        frame = next((f for f in stack if is_user_file(f.file)), stack[0])
        return f"{shown_path(frame.file)}:{frame.line}"
    meta = instr.attrs.get("metadata", "")
    f, line = _SOURCE_FILE_RE.search(meta), _SOURCE_LINE_RE.search(meta)
    return f"{shown_path(f.group(1))}:{line.group(1)}" if f and line else ""
