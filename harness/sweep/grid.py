"""Sweep files (TOML): a grid of runs, validated in full before anything runs.

```toml
name = "quick"            # the sweep's directory is <name>-<timestamp>; default: the file's stem
steps = 3                 # defaults for every block: steps, warmup, preset, chip
warmup = 1
[[grid]]                  # one block per workload; blocks concatenate
workload = "collective"
mesh = ["8", "4x2"]       # a list sweeps; a scalar is fixed (preset, mesh and chip too);
                          # a mesh named by role ("fsdp=4,model=2") sets the layout too
[grid.set]                # config fields of the workload (`harness run --list`)
kind = ["all_gather", "all_reduce"]
nbytes = [4096, 65536]
```

Lists expand as a cartesian product (presets x meshes x chips x set fields, in file order).
Every key, type, workload, preset, chip, mesh and config value is checked first; the first
problem raises ``SweepFileError`` naming the file, the line, the key and the valid choices. A mesh
that needs more devices than the host has is not a file error: that point fails when it runs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.sweep.toml_lines import key_lines, line_of
from predictions import hardware

TOP_KEYS = ("name", "description", "steps", "warmup", "preset", "chip", "grid")
GRID_KEYS = ("workload", "preset", "mesh", "chip", "steps", "warmup", "set")
DEFAULTS = {"steps": 5, "warmup": 2, "preset": "tiny", "chip": None}  # as `harness run`
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SCALARS = (str, int, float, bool)


class SweepFileError(HarnessError):
    """A malformed sweep file; ``line`` and ``key`` locate the problem."""

    def __init__(self, path: Path, line: int, key: str, problem: str):
        super().__init__(f"{path}:{line}: {key}: {problem}")
        self.path, self.line, self.key, self.problem = path, line, key, problem


@dataclass(frozen=True, eq=False)
class Point:
    """One run of a sweep: what ``harness.runs.workload.run_workload`` gets."""

    workload: str
    preset: str
    mesh: str
    overrides: dict
    chip: str | None
    steps: int
    warmup: int

    def identity(self) -> dict:
        return {"workload": self.workload, "preset": self.preset, "mesh": self.mesh,
                "overrides": self.overrides, "chip": self.chip, "steps": self.steps,
                "warmup": self.warmup}

    @property
    def key(self) -> str:
        """Stable across runs and machines: a hash of everything that defines the point."""
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def settings(self) -> str:
        """The overrides as ``kind=all_gather nbytes=4096``."""
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())

    @property
    def label(self) -> str:
        chip = f" chip={self.chip}" if self.chip else ""
        return f"{self.workload} ({self.preset}) mesh={self.mesh}{chip} {self.settings}".strip()


@dataclass(frozen=True)
class SweepGrid:
    """A validated sweep file and its expanded points (duplicates dropped)."""

    name: str
    path: Path
    text: str
    description: str
    points: tuple[Point, ...]


class _Checker:
    """Validation with line numbers: ``fail(path, problem)`` raises at the key's line."""

    def __init__(self, path: Path, text: str):
        self.path, self.lines = path, key_lines(text)

    def fail(self, where: tuple, problem: str):
        raise SweepFileError(self.path, line_of(self.lines, where), _key_name(where), problem)

    def each(self, where: tuple, value: Any, kind: type | tuple, what: str) -> list:
        """``value`` as a non-empty list of ``kind`` (a scalar counts as a one-element list)."""
        values = value if isinstance(value, list) else [value]
        if not values:
            self.fail(where, "empty list: give at least one value")
        for v in values:
            if not isinstance(v, kind) or isinstance(v, bool) and bool not in _tuple(kind):
                self.fail(where, f"expected {what}, got {_typename(v)} {v!r}")
        return values

    def count(self, where: tuple, value: Any, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(where, f"expected an integer >= {minimum}, got {_typename(value)} {value!r}")
        return value


def _tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _typename(v: Any) -> str:
    return {str: "string", int: "integer", float: "float", bool: "boolean", list: "array",
            dict: "table"}.get(type(v), type(v).__name__)


def _key_name(where: tuple) -> str:
    """("grid", 1, "set", "B") -> "grid[2].set.B" (blocks counted from 1, as a reader would)."""
    out = ""
    for part in where:
        out += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(file)"


def load_sweep(path: str | Path) -> SweepGrid:
    """Read, validate and expand a sweep file; raises ``SweepFileError`` on the first problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise HarnessError(f"{path}: cannot read sweep file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise HarnessError(f"{path}:{line}: not UTF-8 text (byte {e.object[e.start]:#04x} at "
                           f"offset {e.start}); TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise SweepFileError(path, int(m.group(1)) if m else 1, "(file)",
                             f"not valid TOML: {e}") from None
    return parse_sweep(data, text, path)


def parse_sweep(data: dict, text: str, path: Path) -> SweepGrid:
    c = _Checker(path, text)
    for key in data:
        if key not in TOP_KEYS:
            c.fail((key,), f"unknown key; valid: {', '.join(TOP_KEYS)}")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not _NAME.match(name):
        c.fail(("name",), f"expected a name of letters, digits, '.', '_', '-', got {name!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        c.fail(("description",), f"expected a string, got {_typename(description)}")
    defaults = _settings(c, data, (), DEFAULTS)
    grid = data.get("grid")
    if grid is None:
        c.fail(("grid",), "missing: add at least one [[grid]] block with a workload")
    if not isinstance(grid, list) or not grid or not all(isinstance(b, dict) for b in grid):
        c.fail(("grid",), "expected [[grid]] blocks (an array of tables)")
    points, seen = [], set()
    for i, block in enumerate(grid):
        for p in _block(c, block, i, defaults):
            if p.key not in seen:  # the same run listed twice is run once
                seen.add(p.key)
                points.append(p)
    return SweepGrid(name=name, path=path, text=text, description=description,
                     points=tuple(points))


def _settings(c: _Checker, table: dict, where: tuple, defaults: dict) -> dict:
    """steps, warmup (scalars) and preset, chip (lists) of a table, over ``defaults``."""
    out = dict(defaults)
    if "steps" in table:
        out["steps"] = c.count(where + ("steps",), table["steps"], 1)
    if "warmup" in table:
        out["warmup"] = c.count(where + ("warmup",), table["warmup"], 0)
    if "preset" in table:
        out["preset"] = c.each(where + ("preset",), table["preset"], str, "a preset name")
    if "chip" in table:
        chips = c.each(where + ("chip",), table["chip"], str, "a chip name")
        for chip in chips:
            if chip not in hardware.CHIPS:
                c.fail(where + ("chip",), f"unknown chip {chip!r}; valid: "
                       f"{', '.join(hardware.CHIPS)}")
        out["chip"] = chips
    return out


def _block(c: _Checker, block: dict, i: int, defaults: dict) -> list[Point]:
    import jax  # deferred: importing workloads imports jax

    import workloads
    from workloads.base import with_layout
    from workloads.mesh import default_shape, mesh_name, shape_str

    at = ("grid", i)
    for key in block:
        if key not in GRID_KEYS:
            c.fail(at + (key,), f"unknown key in [[grid]]; valid: {', '.join(GRID_KEYS)}")
    if "workload" not in block:
        c.fail(at, f"missing key 'workload'; valid: {', '.join(workloads.WORKLOADS)}")
    name = block["workload"]
    if not isinstance(name, str) or name not in workloads.WORKLOADS:
        c.fail(at + ("workload",), f"unknown workload {name!r}; valid: "
               f"{', '.join(workloads.WORKLOADS)}")
    wl = workloads.WORKLOADS[name]
    s = _settings(c, block, at, defaults)
    presets = s["preset"] if isinstance(s["preset"], list) else [s["preset"]]
    for preset in presets:
        if preset not in wl.presets:
            c.fail(at + ("preset",), f"{name} has no preset {preset!r}; valid: "
                   f"{', '.join(wl.presets)}")
    meshes = [shape_str(default_shape(jax.device_count(), len(wl.mesh_axes)))]
    if "mesh" in block:
        meshes = c.each(at + ("mesh",), block["mesh"], (str, int),
                        "a mesh like '4x2' or 'fsdp=4,model=2'")
        try:
            meshes = [mesh_name(m) for m in meshes]
        except ValueError as e:
            c.fail(at + ("mesh",), str(e))
    chips = s["chip"] if isinstance(s["chip"], list) else [s["chip"]]
    fields = _fields(c, block.get("set", {}), at + ("set",), name, presets)
    names = list(fields)
    points = []
    for preset, mesh, chip, combo in itertools.product(presets, meshes, chips,
                                                        itertools.product(*fields.values())):
        overrides = dict(zip(names, combo))
        try:  # a mesh named by role sets the layout (as ``harness run --mesh`` does)
            overrides = with_layout(wl, overrides, None, mesh) if "=" in mesh else overrides
        except ValueError as e:
            c.fail(at + ("mesh",), str(e).removeprefix("--mesh "))
        try:  # fields that are valid alone may clash together (e.g. matmul's x_spec/y_spec)
            workloads.make_config(name, preset, overrides)
        except ValueError as e:
            c.fail(at + ("set",), f"{' '.join(f'{k}={v}' for k, v in overrides.items())}: {e}")
        points.append(Point(workload=name, preset=preset, mesh=mesh, overrides=overrides,
                            chip=chip, steps=s["steps"], warmup=s["warmup"]))
    return points


def _fields(c: _Checker, table: Any, at: tuple, name: str, presets: list[str]) -> dict[str, list]:
    """The [grid.set] table as field -> values, each value checked alone against each preset."""
    import workloads  # deferred: importing workloads imports jax

    if not isinstance(table, dict):
        c.fail(at, f"expected a table of config fields, got {_typename(table)}")
    wl = workloads.WORKLOADS[name]
    valid = [f.name for f in dataclasses.fields(wl.Config)]
    out = {}
    for key, value in table.items():
        where = at + (key,)
        if key not in valid:
            c.fail(where, f"{name} has no config field {key!r}; valid: {', '.join(valid)}")
        values = c.each(where, value, _SCALARS, "a string, number or boolean (or a list of them)")
        for preset in presets:
            current = getattr(wl.presets[preset], key)
            for v in values:
                _check_type(c, where, v, current)
                try:
                    workloads.make_config(name, preset, {key: v})
                except ValueError as e:
                    c.fail(where, str(e))
        out[key] = values
    return out


def _check_type(c: _Checker, where: tuple, value: Any, current: Any) -> None:
    """A TOML value must have the field's type (strings are coerced by ``make_config``)."""
    if isinstance(value, str) and not isinstance(current, str):
        return
    want = type(current)
    ok = (isinstance(value, bool) if want is bool else
          isinstance(value, int) and not isinstance(value, bool) if want is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if want is float else
          isinstance(value, want))
    if not ok:
        c.fail(where, f"expected {_typename(current)}, got {_typename(value)} {value!r}")
