"""One HLO instruction line -> :class:`Instruction`.

``[ROOT] %name = <shape> <opcode>(<operands>), key=value, ...`` where the shape is a leaf
``f32[512,256]{1,0:T(8,128)S(1)}`` or a tuple of leaves, operands are ``%name`` (older text also
prints each operand's shape), and values may nest ``{}``/``()``/``[]`` and quoted strings. Work per
line is linear in its length (regexes compiled once; shapes cached by their text).
"""
from __future__ import annotations

import re

from harness.hlo import attrs as hlo_attrs
from harness.hlo.attrs import HloParseError
from harness.hlo.ir import Instruction
from predictions.dtypes import DTYPE_BYTES
from predictions.rules import Shape

_INSTR_RE = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_LEAF_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")
_DIMS_RE = re.compile(r"(?:<=)?\d+(?:,(?:<=)?\d+)*")
_OPCODE_RE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_PAREN_RE = re.compile(r"[()]")
_COMMENT_RE = re.compile(r"/\*.*?\*/")
_PCT_NAME_RE = re.compile(r"%([\w.\-]+)")
_NAME_RE = re.compile(r"[\w.\-]+")
_KEY_RE = re.compile(r"[\w.\-]+")
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_SPACE_RE = re.compile(r"S\((\d+)\)")
_TUPLE_REST_RE = re.compile(r"[()\s,]*")
_INDEX_RE = re.compile(r"[0-9]+")

LITERAL_OPCODES = ("parameter", "constant")  # their parentheses hold a literal, not operands


def err(lineno: int, what: str, text: str = "") -> HloParseError:
    """``line N: <what was expected>; got '<text>'`` on one line."""
    got = f"; got {text.strip()[:80]!r}" if text else ""
    return HloParseError(f"line {lineno}: {what}{got}")


_LEAF_CACHE: dict[str, tuple[Shape, int]] = {}


def _leaf(m: re.Match, lineno: int) -> tuple[Shape, int]:
    key = m.group(0)
    hit = _LEAF_CACHE.get(key)
    if hit is not None:
        return hit
    dtype, dims, layout = m.group(1), m.group(2), m.group(3) or ""
    if dtype not in DTYPE_BYTES:
        raise err(lineno, f"unknown element type {dtype!r} "
                          f"(known: {', '.join(sorted(DTYPE_BYTES))})")
    if dims and _DIMS_RE.fullmatch(dims) is None:
        raise err(lineno, "expected dimensions like [512,256]", key)
    shape = Shape(dtype, tuple(int(d.removeprefix("<=")) for d in dims.split(",")) if dims else ())
    space = _SPACE_RE.search(layout)
    hit = (shape, int(space.group(1)) if space else 0)
    if len(_LEAF_CACHE) < 100_000:
        _LEAF_CACHE[key] = hit
    return hit


def _close_paren(s: str, i: int) -> int:
    """Index of the ``)`` matching ``s[i] == "("``, or -1."""
    j = s.find(")", i)
    if j < 0 or s.find("(", i + 1, j) < 0:
        return j
    depth = 0
    for m in _PAREN_RE.finditer(s, i):
        depth += 1 if m.group() == "(" else -1
        if depth == 0:
            return m.start()
    return -1


def _shape_at(line: str, pos: int, lineno: int) -> tuple[tuple, tuple, int]:
    """The result shape starting at ``pos``: (leaves, memory spaces, end position)."""
    if line.startswith("(", pos):
        end = _close_paren(line, pos)
        if end < 0:
            raise err(lineno, "unclosed '(' in tuple shape", line[pos:])
        text = line[pos:end + 1]
        if "/*" in text:
            text = _COMMENT_RE.sub("", text)
        leaves = [_leaf(m, lineno) for m in _LEAF_RE.finditer(text)]
        if _TUPLE_REST_RE.fullmatch(_LEAF_RE.sub("", text)) is None:
            raise err(lineno, "expected a tuple shape like (f32[2], s32[])", text)
        return tuple(s for s, _ in leaves), tuple(m for _, m in leaves), end + 1
    m = _LEAF_RE.match(line, pos)
    if m is None:
        raise err(lineno, "expected a shape like f32[512,256]{1,0}", line[pos:])
    shape, space = _leaf(m, lineno)
    return (shape,), (space,), m.end()


def _operand_names(text: str, lineno: int) -> tuple[str, ...]:
    if "%" in text:
        return tuple(_PCT_NAME_RE.findall(text))
    text = _LEAF_RE.sub("", _COMMENT_RE.sub("", text)).replace("(", " ").replace(")", " ")
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    for n in names:
        if _NAME_RE.fullmatch(n) is None:
            raise err(lineno, "expected operand names", n)
    return names


def balanced(s: str) -> bool:
    """Brackets and quotes close (escaped quotes inside strings allowed)."""
    if '"' in s:
        s = _STRING_RE.sub("", s)
        if '"' in s:
            return False
    return (s.count("{") == s.count("}") and s.count("(") == s.count(")")
            and s.count("[") == s.count("]"))


def _split_attrs(text: str, lineno: int) -> list[str]:
    """``a={1,0}, b="x, y", c=...`` -> top-level ``key=value`` pieces."""
    out: list[str] = []
    acc: list[str] = []
    depth, dirty = 0, False
    for piece in text.split(", "):
        acc.append(piece)
        dirty = dirty or '"' in piece
        if dirty:
            done = balanced(", ".join(acc))
        else:
            depth += (piece.count("{") + piece.count("(") + piece.count("[")
                      - piece.count("}") - piece.count(")") - piece.count("]"))
            done = depth == 0
        if done:
            joined = ", ".join(acc)
            # The mesh form prints ``mesh[...], device_ids=(...) {axes}``: one value.
            if joined.startswith("device_ids=") and out:
                out[-1] = f"{out[-1]}, {joined}"
            else:
                out.append(joined)
            acc, depth, dirty = [], 0, False
    if acc:
        raise err(lineno, "unbalanced brackets or quotes in attributes", ", ".join(acc))
    return out


def _attributes(text: str, lineno: int, name: str) -> dict:
    attrs: dict = {}
    for piece in _split_attrs(text, lineno):
        key, eq, value = piece.partition("=")
        key = key.strip()
        if not eq or _KEY_RE.fullmatch(key) is None:
            raise err(lineno, f"expected an attribute 'key=value' on %{name}", piece)
        parser = hlo_attrs.PARSERS.get(key)
        if parser is None:
            attrs[key] = value.strip()
            continue
        try:
            attrs[key] = parser(value)
        except HloParseError as e:
            raise err(lineno, f"{key} of %{name}: {e}") from None
    return attrs


def parse_instruction(line: str, lineno: int, computation: str) -> Instruction:
    """One instruction line ``[ROOT] %name = shape opcode(operands), attrs``."""
    m = _INSTR_RE.match(line)
    if m is None:
        raise err(lineno, "expected an instruction '%name = shape opcode(...)' or '}'", line)
    name = m.group(2)
    shapes, spaces, pos = _shape_at(line, m.end(), lineno)
    om = _OPCODE_RE.match(line, pos)
    if om is None:
        raise err(lineno, f"expected an opcode and '(' after the shape of %{name}", line[pos:])
    opcode, open_ = om.group(1), om.end() - 1
    close = _close_paren(line, open_)
    if close < 0:
        raise err(lineno, f"unclosed '(' in the operands of %{name}", line[open_:])
    inner = line[open_ + 1:close]
    literal, operands = "", ()
    if opcode in LITERAL_OPCODES:
        literal = inner.strip()
        if opcode == "parameter" and _INDEX_RE.fullmatch(literal) is None:
            raise err(lineno, f"expected parameter(<index>) for %{name}", inner)
    else:
        operands = _operand_names(inner, lineno)
    rest = line[close + 1:].strip()
    if rest and not rest.startswith(","):
        raise err(lineno, f"expected ', attribute=value' after the operands of %{name}", rest)
    attrs = _attributes(rest[1:].strip(), lineno, name) if rest[1:].strip() else {}
    return Instruction(name, opcode, shapes, spaces, operands, attrs, lineno, computation,
                       bool(m.group(1)), literal)

