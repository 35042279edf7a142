"""XLA's buffer assignment and live ranges, read from the text its dump writes (the CPU, GPU and
TPU compilers print the same format; ``harness.memory.dump``).

``*-buffer-assignment.txt``::

    allocation 1: size 32768, parameter 0, shape |f32[64,128]| at ShapeIndex {}:
     value: <24 w.1 @0> (size=32768,offset=0): f32[64,128]{1,0}
    allocation 4: size 49152, preallocated-temp:
     value: <3281 while.102{6} (phi) @1> (size=8192,offset=2064384): bf16[2,32,2,8]{...S(1)}

``*-live-range.txt`` (``HloLiveRange``: the flattened schedule and each buffer's life in it)::

    HloLiveRange (max 11):
      InstructionSequence:
        0:w.1
      BufferLiveRange:
        w.1{}:0-11
      Live ranges at 9 (peak):
        dot{}: 32768 bytes (cumulative: 32768 bytes)

Read defensively: a line of neither form is counted in ``skipped`` and passed over, never an
error; a value's memory space is the number after ``@`` (0: the device's main memory, HBM; a
TPU's other spaces are on-chip). A buffer is named ``instruction`` or ``instruction{i}`` (a
tuple's element i), the same in both files.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_PARAMETER = re.compile(r"\bparameter (\d+)")
_VALUE = re.compile(r"^\s*value: <(\d+) (\S+?)(?: \(phi\))? @(\d+)> "
                    r"\(size=(\d+),offset=(\d+)\): (.*)$")
_SEQUENCE = re.compile(r"^\s+(\d+):(\S+)\s*$")
_RANGE = re.compile(r"^\s+(\S+):(\d+)-(\d+)\s*$")
_PEAK_AT = re.compile(r"^\s*Live ranges at (\d+) \(peak\):")
_PEAK_ROW = re.compile(r"^\s+(\S+): (\d+) bytes")
# what an allocation is, from the words after its size (first match wins)
ROLES = (("parameter", "parameter"), ("constant", "constant"), ("thread-local", "thread-local"),
         ("maybe-live-out", "output"), ("output shape", "output"), ("temp", "temporary"))


def buffer_key(name: str) -> str:
    """``"dot{}"`` -> ``"dot"``; ``"while.95{10}"`` stays: one spelling for both files."""
    return name[:-2] if name.endswith("{}") else name


@dataclass(frozen=True)
class Value:
    """One value of the assignment: its ``size`` in bytes as allocated, memory ``space``,
    ``shape`` text (type, dims, layout), and its allocation's index, ``role`` and, for a
    parameter, its ``parameter`` number."""

    key: str
    size: int
    space: int
    shape: str
    allocation: int
    role: str
    parameter: int | None = None
    offset: int = 0


@dataclass
class Assignment:
    """The values (by buffer key; the main-memory one where a name has several), each
    allocation's size by index, each buffer's live range (start, end) in the flattened schedule
    ``sequence``, and the buffers live at XLA's peak (``peak``: key -> bytes, at ``peak_at``).
    ``skipped``: lines read as neither form."""

    values: dict[str, Value] = field(default_factory=dict)
    allocations: dict[int, tuple[int, str]] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    sequence: list[str] = field(default_factory=list)
    peak_at: int | None = None
    peak: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    @property
    def peak_bytes(self) -> int:
        """The bytes live at XLA's peak: the sum of the buffers it lists there."""
        return sum(self.peak.values())

    def timeline(self, space: int | None = 0) -> tuple[np.ndarray, np.ndarray]:
        """(positions, live bytes at each) over the schedule: each buffer of memory ``space``
        (None: all) counts its size from its start to its end, both included (HloLiveRange's
        convention). Where an instruction writes its result in place over an operand that
        dies there, both count at that one point, so the curve may pass XLA's peak there."""
        n = max([len(self.sequence)] + [e + 1 for _, e in self.ranges.values()])
        delta = np.zeros(n + 1, np.int64)
        for key, (start, end) in self.ranges.items():
            v = self.values.get(key)
            if v is None or (space is not None and v.space != space):
                continue
            delta[start] += v.size
            delta[end + 1] -= v.size
        return np.arange(n), np.cumsum(delta)[:n]


def _role(rest: str) -> tuple[str, int | None]:
    role = next((r for word, r in ROLES if word in rest), "other")
    m = _PARAMETER.search(rest)
    return role, (int(m.group(1)) if m and role == "parameter" else None)


def read_assignment(text: str, out: Assignment | None = None) -> Assignment:
    """The allocations and values of a ``*-buffer-assignment.txt``."""
    out = out if out is not None else Assignment()
    index, role, param = -1, "other", None
    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            index = int(m.group(1))
            role, param = _role(m.group(3))
            out.allocations[index] = (int(m.group(2)), role)
            continue
        m = _VALUE.match(line)
        if m and index >= 0:
            key, space = buffer_key(m.group(2)), int(m.group(3))
            old = out.values.get(key)
            if old is None or (old.space != 0 and space == 0):
                out.values[key] = Value(key, int(m.group(4)), space, m.group(6).strip(),
                                        index, role, param, int(m.group(5)))
        elif line.strip() and not line.startswith(("BufferAssignment", "Total", "Used")):
            out.skipped += 1
    return out


def read_live_range(text: str, out: Assignment | None = None) -> Assignment:
    """The schedule, live ranges and peak of a ``*-live-range.txt``."""
    out = out if out is not None else Assignment()
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("InstructionSequence:", "BufferLiveRange:"):
            section = stripped
            continue
        m = _PEAK_AT.match(line)
        if m:
            section, out.peak_at = "peak", int(m.group(1))
            continue
        if stripped.startswith(("HloLiveRange", "Stack trace")):
            section = "" if stripped.startswith("Stack") else section
            continue
        if section == "InstructionSequence:" and (m := _SEQUENCE.match(line)):
            out.sequence.append(m.group(2))
        elif section == "BufferLiveRange:" and (m := _RANGE.match(line)):
            out.ranges[buffer_key(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        elif section == "peak" and (m := _PEAK_ROW.match(line)):
            out.peak[buffer_key(m.group(1))] = int(m.group(2))
        elif section and stripped:
            out.skipped += 1
    return out


def read(assignment_text: str, live_range_text: str) -> Assignment:
    """Both files of one program as one ``Assignment``."""
    return read_live_range(live_range_text, read_assignment(assignment_text))
