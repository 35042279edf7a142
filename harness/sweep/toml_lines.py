"""Line numbers of keys in a TOML text (``tomllib`` reports none for values).

``key_lines(text)`` maps each key path to the line that defines it: ``("steps",)``,
``("grid", 0)`` for the first ``[[grid]]`` header, ``("grid", 0, "set", "B")`` for a key of its
``[grid.set]`` table (or of a dotted key ``set.B = ...``). Keys inside inline tables map to the
line of the key that holds the table; ``line_of`` falls back to the nearest enclosing path. The
scan is a light tokenizer: it skips comments, strings, multi-line strings and multi-line arrays,
which is all a valid file (``tomllib`` has parsed it first) needs.
"""
from __future__ import annotations

import re

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=")
_STRINGS = re.compile(rf'"""|\'\'\'|{_QUOTED}')


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in re.findall(_PART, dotted))


def _indexed(name: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> tuple:
    """``("grid", "set")`` -> ``("grid", 2, "set")`` when ``grid`` is an array of tables
    whose current (last) element is number 2."""
    out: list = []
    for i, part in enumerate(name):
        out.append(part)
        if name[:i + 1] in arrays:
            out.append(arrays[name[:i + 1]])
    return tuple(out)


def _depth(code: str) -> tuple[int, str | None]:
    """Net bracket depth of a line's code (strings and comments removed), and an opening
    multi-line string delimiter left open at the end of the line, if any."""
    depth, pos = 0, 0
    while pos < len(code):
        m = _STRINGS.search(code, pos)
        chunk = code[pos:m.start()] if m else code[pos:]
        chunk = chunk.split("#", 1)[0]
        depth += chunk.count("[") + chunk.count("{") - chunk.count("]") - chunk.count("}")
        if not m or "#" in code[pos:m.start()]:
            return depth, None
        if m.group() in ('"""', "'''"):
            end = code.find(m.group(), m.end())
            if end < 0:
                return depth, m.group()
            pos = end + 3
        else:
            pos = m.end()
    return depth, None


def key_lines(text: str) -> dict[tuple, int]:
    lines: dict[tuple, int] = {}
    arrays: dict[tuple[str, ...], int] = {}
    table: tuple = ()
    depth, open_string = 0, None
    for no, line in enumerate(text.splitlines(), 1):
        if open_string:  # inside a multi-line string
            if open_string in line:
                rest = line.split(open_string, 1)[1]
                open_string = None
                d, open_string = _depth(rest)
                depth += d
            continue
        if depth > 0:    # inside a multi-line array or inline table
            d, open_string = _depth(line)
            depth += d
            continue
        m = _ARRAY_HEADER.match(line)
        if m:
            name = _parts(m.group(1))
            arrays[name] = arrays.get(name, -1) + 1
            table = _indexed(name, arrays)
            lines.setdefault(table, no)
            continue
        m = _TABLE_HEADER.match(line)
        if m and not _KEY.match(line):
            table = _indexed(_parts(m.group(1)), arrays)
            lines.setdefault(table, no)
            continue
        m = _KEY.match(line)
        if m:
            path = table + _parts(m.group(1))
            for i in range(len(table) + 1, len(path) + 1):  # a.b.c = 1 also defines a.b
                lines.setdefault(path[:i], no)
            d, open_string = _depth(line[m.end():])
            depth = max(d, 0)
    return lines


def line_of(lines: dict[tuple, int], path: tuple) -> int:
    """The line of ``path``, or of its nearest enclosing key or table; 1 when none is known."""
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return 1
