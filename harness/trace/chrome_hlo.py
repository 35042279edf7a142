"""Each program's HLO rebuilt from a TPU Chrome JSON trace's op texts (``harness.trace.chrome``).

The JSON carries no module, only the instruction of each op that ran (``long_name``: the
instruction as XLA prints it, each operand with its shape). The module rebuilt here holds those
instructions in one ENTRY computation, in the order they first ran:

- an operand no op defines (a parameter, a get-tuple-element, a bitcast, a constant: what runs
  as no op) becomes a parameter of the shape the instruction prints for it;
- a called computation is unknown. A fusion's body or an async op's wrapped op is stood in for
  by one custom call over the caller's operands that returns its result, priced by the
  trace's own figures where it gives them (``model_flops``, ``bytes_accessed``: the cost
  estimate a Pallas kernel declares, ``harness.hlo.calls``), so a fusion's FLOPs are the
  trace's and its HBM bytes its operands' and result's as printed, each operand read whole
  (``predictions.rules.fusion_cost``: which part of an operand it slices is in the body), and
  one without those figures is left unmodeled (``UNKNOWN``); a reduction's body (``to_apply``)
  is a custom call of two scalars, priced by no rule;
- control flow (``while``, ``conditional``, ``call``) is left out: its bodies' ops ran as ops
  of their own;
- the JAX op of each op (``tf_op``) and its innermost user frame (``source_stack``, else
  ``source``) become its metadata, where ``harness.hlo.source`` finds the user's line.

A collective keeps its replica groups as printed (``replica_groups=[1,2]<=[2]``) and the module
its device count (``num_partitions``), so collectives are priced as from the compiled HLO.
"""
from __future__ import annotations

import json
import logging
import re

from harness.hlo.attrs import CALL_ATTRS, HloParseError
from harness.hlo.line import parse_instruction
from harness.hlo.source import is_user_file

log = logging.getLogger(__name__)

STAND_IN = "tpu_custom_call"  # priced by its custom_call_config.cost_estimate
UNKNOWN = "body_unknown_in_chrome_json"  # a target no rule knows: unmodeled, named as the reason
CONTROL = frozenset({"while", "conditional", "call"})
PRICED_CALLS = "calls"  # the attribute whose body the trace's figures price
_ROOT = re.compile(r"^\s*ROOT\s+")
_DTYPE = re.compile(r"([a-z][a-z0-9]*)\[")
_OPENS, _CLOSES = "([{", ")]}"


def _split(text: str) -> list[str]:
    """``text`` cut at its top-level commas (outside brackets)."""
    pieces, depth, last = [], 0, 0
    for k, c in enumerate(text):
        if c in _OPENS:
            depth += 1
        elif c in _CLOSES:
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(text[last:k])
            last = k + 1
    return [p.strip() for p in [*pieces, text[last:]] if p.strip()]


def _closing(text: str, at: int) -> int:
    """Index of the bracket closing the one at ``at`` (-1: never closed)."""
    depth = 0
    for k in range(at, len(text)):
        depth += (text[k] in _OPENS) - (text[k] in _CLOSES)
        if depth == 0:
            return k
    return -1


class _Op:
    """One op's instruction text, parsed: its name, opcode, result shape (text), operands
    (name -> printed shape text), called computations ((attr, name)) and the trace's args."""

    def __init__(self, text: str, args: dict):
        self.text = _ROOT.sub("", text).strip()
        instr = parse_instruction(self.text, 1, "main")
        self.name, self.opcode, self.args = instr.name, instr.opcode, args
        rest = self.text.partition("=")[2]
        at = rest.find(f" {self.opcode}(")
        close = _closing(rest, at + len(self.opcode) + 1)
        if at < 0 or close < 0:
            raise HloParseError(f"%{self.name}: cannot find its operands")
        self.shape = rest[:at].strip()
        self.operands = {}
        for piece in _split(rest[at + len(self.opcode) + 2:close]):
            shape, _, name = piece.rpartition("%")
            if not shape.strip():  # an operand printed without its shape
                raise HloParseError(f"%{self.name}: operand %{name} has no printed shape")
            self.operands.setdefault(name.strip(), shape.strip())
        self.called = [(a, c) for a in CALL_ATTRS for c in instr.attrs.get(a, ())]
        # a body XLA shares between callers (``deduplicated_name``) is stood in for per caller:
        # each stand-in carries its own caller's figures
        for attr, name in [c for c in self.called if c[0] == PRICED_CALLS]:
            own = f"{name}.{self.name}"
            self.text = re.sub(rf"\b{attr}=%{re.escape(name)}(?![\w.\-])", f"{attr}=%{own}",
                               self.text)
            self.called[self.called.index((attr, name))] = (attr, own)

    def line(self) -> str:
        """The instruction with the trace's op and source line as its metadata."""
        op_name, (file, number) = self.args.get("tf_op", ""), _source(self.args)
        meta = [f'op_name="{_escaped(op_name)}"'] if op_name else []
        if file and number.isdigit():
            meta += [f'source_file="{_escaped(file)}"', f"source_line={number}"]
        if not meta or "metadata=" in self.text:
            return self.text
        return f"{self.text}, metadata={{{' '.join(meta)}}}"


def _source(args: dict) -> tuple[str, str]:
    """(file, line) of the innermost user frame of an op's ``source_stack`` (``path:line:col``
    per line, innermost first), else of its ``source`` (``path:line``)."""
    frames = [f.rsplit(":", 2) for f in str(args.get("source_stack", "")).splitlines()
              if f.count(":") >= 2]
    user = next(((f[0], f[1]) for f in frames if is_user_file(f[0]) and f[1].isdigit()), None)
    if user is not None:
        return user
    file, _, number = str(args.get("source", "")).rpartition(":")
    return file, number


def _escaped(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _estimate(args: dict) -> dict | None:
    """The trace's figures of an op as a kernel's cost estimate (None where it lacks one)."""
    try:
        flops, nbytes = int(args["model_flops"]), int(args["bytes_accessed"])
    except (KeyError, TypeError, ValueError):
        return None
    config = {"custom_call_config": {"cost_estimate": {
        "flops": str(flops), "bytes_accessed": str(nbytes), "transcendentals": "0"}}}
    return config


def _body(name: str, caller: _Op, attr: str) -> list[str]:
    """The stand-in computation ``name`` that ``caller`` calls through ``attr``."""
    if attr == PRICED_CALLS:
        shapes, result, config = list(caller.operands.values()), caller.shape, \
            _estimate(caller.args)
    else:  # a reduction's body: two scalars of the result's element type
        dtype = (_DTYPE.search(caller.shape) or _DTYPE.search("f32[")).group(1)
        shapes, result, config = [f"{dtype}[]", f"{dtype}[]"], f"{dtype}[]", None
    params = [f"%{name}.p{k} = {s} parameter({k})" for k, s in enumerate(shapes)]
    operands = ", ".join(f"%{name}.p{k}" for k in range(len(shapes)))
    target = STAND_IN if config else UNKNOWN
    backend = f", backend_config={json.dumps(config, separators=(',', ':'))}" if config else ""
    root = (f"ROOT %{name}.body = {result} custom-call({operands}), "
            f'custom_call_target="{target}"{backend}')
    return [f"%{name} {{", *(f"  {p}" for p in params), f"  {root}", "}"]


def module_text(program: str, texts: dict, devices: int) -> str | None:
    """The HLO text of one program from its ops' ``{op: args}`` (in the order they ran), or
    None where no op's text could be read."""
    ops, skipped = [], []
    for name, args in texts.items():
        try:
            op = _Op(str(args.get("long_name") or ""), args)
        except HloParseError as e:
            skipped.append(f"{name} ({e})")
            continue
        if op.opcode not in CONTROL and op.name == name:
            ops.append(op)
    if skipped:
        log.info("%s: %d op texts could not be read, left out: %s", program, len(skipped),
                 "; ".join(skipped[:3]))
    if not ops:
        return None
    defined = {op.name for op in ops}
    params: dict[str, str] = {}
    bodies: dict[str, list[str]] = {}
    for op in ops:
        for name, shape in op.operands.items():
            if name not in defined:
                params.setdefault(name, shape)
        for attr, name in op.called:
            if name not in bodies:
                bodies[name] = _body(name, op, attr)
    entry = [f"  %{n} = {s} parameter({k})" for k, (n, s) in enumerate(params.items())]
    entry += [f"  {op.line()}" for op in ops]
    lines = [f"HloModule {program}, num_partitions={devices}", ""]
    for body in bodies.values():
        lines += [*body, ""]
    return "\n".join([*lines, "ENTRY %main {", *entry, "}", ""])


def rebuild(programs: dict, devices: int) -> dict:
    """(program, program id) -> its rebuilt HLO text, for each program whose ops' texts can be
    read (``programs``: (name, id) -> {op: its trace args})."""
    out = {}
    for (name, pid), texts in programs.items():
        text = module_text(name, texts, devices)
        if text is not None:
            out[(name, pid)] = text
    return out
