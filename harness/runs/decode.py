"""A trace decoded once, with the HLO of each program that ran parsed once (``decode``): the
given HLO text for the program it names, else the trace's own (``/host:metadata``), else what
``harness`` saved beside it; one job's traces of several hosts read as one (``hosts``).
``select`` checks a program asked for against the programs that ran.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from harness.analysis.programs import ProgramKey, chosen, program_name, programs_ran
from harness.errors import HarnessError
from harness.hlo import Module, parse_module, schedule
from harness.trace import parallel
from harness.trace.hlo_proto import async_names, embedded_modules, module_text
from harness.trace.hosts import read_job
from harness.trace.load import TraceEvents, read_events, read_xspace

log = logging.getLogger(__name__)


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


def decode(source, *, hlo_text: str | None = None, warmup_steps: int = 0,
           saved_hlo: str | None = None, label: str | None = None,
           hosts: Sequence[Path] = (), path: Path | None = None) -> Decoded:
    """Decode a trace (a path, a directory holding one, bytes or an XSpace, which ``label``
    names) and parse the HLO of each program that ran, each once: ``hlo_text`` for the program
    it names, else the trace's own, else ``saved_hlo`` (what ``harness`` saved beside it).
    ``hosts``: one profile's traces of several hosts (``harness.trace.hosts``), the trace
    among them read from ``path``: the others are decoded too, and the job's EVENTS merged."""
    space, read_label = read_xspace(source)
    label = label or read_label
    embedded = _Embedded(space)
    if parallel.started(space) and embedded.raw:  # workers are decoding: parse the largest
        embedded.get(max(embedded.raw, key=lambda k: len(embedded.raw[k])))  # program meanwhile
    text = hlo_text if hlo_text is not None else (saved_hlo if not embedded.raw else None)
    if text is None and not embedded.raw and not embedded.damaged:
        raise NoHlo(f"{label}: the trace holds no HLO; give the program's optimized HLO with "
                    f"--hlo FILE (an XLA dump, *after_optimizations.txt)")
    given = parse_module(text) if text is not None else None

    def module(key: ProgramKey) -> tuple[Module, dict] | None:
        if given is not None and key[0] == given.name:
            found = embedded.get(key)
            return given, (found[1] if found else {})
        return embedded.get(key)

    def schedule_of(name: str):
        found = module((name, ""))
        return schedule(*found) if found else None

    trace = read_events(space, warmup_steps=warmup_steps, schedule_of=schedule_of, label=label)
    ran = programs_ran(trace.events)
    if given is not None and not any(k[0] == given.name for k in ran):
        raise HarnessError(f"{label}: the HLO given is program {given.name}, which did not run "
                           f"in this trace; programs that ran: {_names(ran)}")
    modules = {key: found[0] for key in ran if (found := module(key)) is not None}
    decoded = Decoded(space, label, trace, modules, embedded.damaged)
    if len(hosts) > 1:  # one profile's traces of several hosts: one job's run
        decoded.job, decoded.processes = read_job(list(hosts), path, trace, warmup_steps)
    return decoded


def _names(keys) -> str:
    return ", ".join(program_name(k) for k in keys) or "none"


def select(decoded: Decoded, program: str) -> str:
    """``program`` (a name or a program id) checked against the programs that ran; a one-line
    error naming them when it is none of them."""
    ran = programs_ran(decoded.trace.events)
    if not any(chosen(key, program) for key in ran):
        raise HarnessError(f"{decoded.label}: no program {program!r} ran; programs that ran "
                           f"(name(program id)): {_names(ran)}")
    return program
