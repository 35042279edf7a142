"""A located trace (``harness.trace.located``) decoded once, with the HLO of each program that ran
parsed once (``decode``): one host's trace; one profile's traces of several hosts, read as one
job's (``harness.trace.hosts``); or a trace recorded in segments (``harness profile``), read as
one trace: each finished segment decoded on its own, their EVENTS merged
(``harness.trace.segments``), the HLO of every program that ran in any of them.

The work goes down the stages once: every trace's EVENTS first (each segment's, each host's),
then which programs ran in them (``harness.measure.programs``), then the HLO of those programs
(``harness.hlo``): the given HLO text for the program it names, else the trace's own
(``/host:metadata``), else what ``harness`` saved beside it. Two parses come earlier: a GPU
trace is read with the schedule of each program whose CUDA-graph kernels it attributes
(``schedule_of``), and while worker processes decode a trace (``harness.trace.parallel``) the
largest program is parsed meanwhile. ``select`` checks a program asked for against the programs
that ran.

A segment in which no XLA op ran (the script was busy elsewhere) adds nothing; one that cannot be
read is left out with a warning, the others kept.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import NamedTuple

from google.protobuf.message import DecodeError

from harness.errors import HarnessError, TraceError
from harness.hlo import Module, parse_module, schedule
from harness.measure.programs import ProgramKey, chosen, program_name
from harness.trace import parallel
from harness.trace.hlo_proto import async_names, embedded_modules, module_text
from harness.trace.hosts import read_job
from harness.trace.load import TraceEvents, read_events, read_xspace
from harness.trace.located import Located
from harness.trace.segments import merge_segments, session_window

log = logging.getLogger(__name__)

# how harness.trace says a trace holds no op: no op line at all (opener), none in them (load)
NO_OPS = ("no XLA op timeline found", "has no XLA op executions")


@dataclass
class Decoded:
    """A trace decoded once, with the HLO of each program that ran parsed once: the XSpace
    (``space``, ``label`` for errors), its EVENTS, and (name, program id) -> module; for one
    job's traces of several hosts, every host's EVENTS (``job``) and one record per host
    (``processes``)."""

    space: object
    label: str
    trace: TraceEvents
    modules: dict = field(default_factory=dict)
    damaged: list = field(default_factory=list)  # programs whose embedded HLO is damaged
    job: TraceEvents | None = None
    processes: list = field(default_factory=list)

    @property
    def analysed(self) -> TraceEvents:
        """The EVENTS the analysis reads: the job's, where several hosts' traces were read,
        else the trace's."""
        return self.job if self.job is not None else self.trace


class NoHlo(HarnessError):
    """The trace holds no HLO and none was given: it can be measured, not predicted."""


class _Embedded:
    """The trace's own HLO of each compilation, printed and parsed on first use, once."""

    def __init__(self, space):
        self.damaged: list[str] = []
        self.raw, self.parsed = embedded_modules(space, self.damaged), {}

    def get(self, key: ProgramKey) -> tuple[Module, dict] | None:
        """(module, async names) of one compilation: by (name, id), else by its name alone
        when the trace holds one compilation of it."""
        if key not in self.parsed:
            raw = self.raw.get(key)
            if raw is None:
                same = [k for k in self.raw if k[0] == key[0]]
                raw = self.raw[same[0]] if len(same) == 1 or not key[1] and same else None
            self.parsed[key] = self._parse(key, raw) if raw else None
        return self.parsed[key]

    def _parse(self, key: ProgramKey, raw: bytes) -> tuple[Module, dict] | None:
        try:
            return parse_module(module_text(raw)), async_names(raw)
        except (HarnessError, DecodeError) as e:  # damaged: that program is measured only
            log.warning("the HLO embedded for %s cannot be read: %s", program_name(key), e)
            self.damaged.append(program_name(key))
            return None


class _Hlo:
    """The HLO of one trace's programs, each parsed on first use, once: ``text`` for the program
    it names (the HLO given, else ``saved`` for a trace that embeds none; ``parse``, shared by
    every segment, parses a text once), else the trace's own (``_Embedded``). Raises ``NoHlo``
    where there is none."""

    def __init__(self, space, label: str, *, given: str | None, saved: str | None,
                 parse: Callable[[str], Module]):
        self.label, self.embedded, self._parse = label, _Embedded(space), parse
        self.text = given if given is not None else (saved if not self.embedded.raw else None)
        if self.text is None and not self.embedded.raw and not self.embedded.damaged:
            raise NoHlo(f"{label}: the trace holds no HLO; give the program's optimized HLO with "
                        f"--hlo FILE (an XLA dump, *after_optimizations.txt)")

    def given(self) -> Module | None:
        """The module of ``text`` (None without one)."""
        return self._parse(self.text) if self.text is not None else None

    def meanwhile(self) -> None:
        """Parse the HLO given and the trace's largest program, while workers decode it."""
        self.given()
        if self.embedded.raw:
            self.embedded.get(max(self.embedded.raw, key=lambda k: len(self.embedded.raw[k])))

    def module(self, key: ProgramKey) -> tuple[Module, dict] | None:
        """(module, async names) of one compilation, or None where its HLO is unknown."""
        given = self.given()
        if given is not None and key[0] == given.name:
            found = self.embedded.get(key)
            return given, (found[1] if found else {})
        return self.embedded.get(key)

    def schedule_of(self, name: str):
        """A program's ops in schedule order (``harness.hlo.schedule``; a GPU trace's
        ``read_events`` asks for them as it reads), None where its HLO is unknown."""
        found = self.module((name, ""))
        return schedule(*found) if found else None

    def modules(self, ran: list[ProgramKey]) -> dict:
        """(name, program id) -> module of each program that ran (``ran``) whose HLO is known;
        a one-line error where the HLO given is of a program that did not run."""
        given = self.given()
        if given is not None and not any(k[0] == given.name for k in ran):
            raise HarnessError(f"{self.label}: the HLO given is program {given.name}, which did "
                               f"not run in this trace; programs that ran: {_names(ran)}")
        return {key: found[0] for key in ran if (found := self.module(key)) is not None}


def _read(space, hlo: _Hlo, warmup_steps: int) -> TraceEvents:
    """One trace's EVENTS, each program's schedule from ``hlo``."""
    if parallel.started(space):  # workers are decoding: parse the HLO meanwhile
        hlo.meanwhile()
    return read_events(space, warmup_steps=warmup_steps, schedule_of=hlo.schedule_of,
                       label=hlo.label)


def decode(found: Located, *, hlo_text: str | None = None, warmup_steps: int = 0) -> Decoded:
    """Decode a located trace and parse the HLO of each program that ran, each once:
    ``hlo_text`` for the program it names, else the trace's own, else what ``harness`` saved
    beside it (``found.saved``). Several segments (``found.segments``): each decoded, their
    EVENTS merged as one trace's; several hosts' traces of one profile (``found.hosts``): the
    others are decoded too, and the job's EVENTS merged. The trace is read whole first, then
    the programs that ran are found, then their HLO parsed."""
    hlo_of = partial(_Hlo, given=hlo_text, saved=found.saved.get("hlo_text"),
                     parse=cache(parse_module))
    parts = _parts(found, hlo_of, warmup_steps)
    if len(parts) == 1:
        decoded = Decoded(found.space, parts[0].hlo.label, parts[0].trace)
    else:
        label = f"{found.path} ({len(found.segments)} segments)"
        merged = merge_segments([p.trace for p in parts], [p.start for p in parts], label)
        decoded = Decoded(parts[-1].space, label, merged)
    if len(found.hosts) > 1:  # one profile's traces of several hosts: one job's run
        decoded.job, decoded.processes = read_job(list(found.hosts), found.file, decoded.trace,
                                                  warmup_steps)
    for part in parts:  # the programs that ran where the HLO is read (each segment), then it
        decoded.modules.update(part.hlo.modules(list(part.trace.ran)))
        decoded.damaged += [d for d in part.hlo.embedded.damaged if d not in decoded.damaged]
    return decoded


class _Part(NamedTuple):
    """One trace read: a plain trace, or one segment of a trace recorded in segments."""

    space: object
    trace: TraceEvents
    hlo: _Hlo
    start: float = 0.0  # a segment's recording start (harness.trace.segments.session_window)


def _parts(found: Located, hlo_of: Callable[..., _Hlo], warmup_steps: int) -> list[_Part]:
    """The trace read: itself, or each of its segments (``found.segments``, in order;
    ``warmup_steps`` are the first one's; one with no op left out). Raises ``TraceError`` when
    no segment holds an op."""
    if len(found.segments) <= 1:
        hlo = hlo_of(found.space, str(found.file))
        return [_Part(found.space, _read(found.space, hlo, warmup_steps), hlo)]
    parts = []
    for path in found.segments:
        space, label = read_xspace(path)
        try:
            hlo = hlo_of(space, label)
            trace = _read(space, hlo, 0 if parts else warmup_steps)
        except TraceError as e:
            if not any(words in str(e) for words in NO_OPS):
                log.warning("segment %s left out: %s", path, e)
            continue
        parts.append(_Part(space, trace, hlo, session_window(space)[0]))
    if not parts:
        raise TraceError(f"{found.path} ({len(found.segments)} segments): no segment holds an "
                         f"XLA op execution")
    return parts


def _names(keys) -> str:
    return ", ".join(program_name(k) for k in keys) or "none"


def select(decoded: Decoded, program: str) -> str:
    """``program`` (a name or a program id) checked against the programs that ran; a one-line
    error naming them when it is none of them."""
    ran = list(decoded.trace.ran)
    if not any(chosen(key, program) for key in ran):
        raise HarnessError(f"{decoded.label}: no program {program!r} ran; programs that ran "
                           f"(name(program id)): {_names(ran)}")
    return program
