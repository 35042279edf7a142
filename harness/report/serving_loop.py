"""A run's serving-loop section (``llama_generate``, issue 55): the request stream's measured
time to first token, time per output token (median and p90), tokens/s and slot occupancy, each
beside the book's prediction for the chip the run was predicted on, with the counts (requests,
tokens out, prefix-cache hits), each program's executions in the captured stream beside the
loop's calls, the stream's time split between the devices' ops and their waits between
executions (the host's: dispatch, python, input, host callbacks), whether that makes the loop
host-bound, and the loop's notes.

The figures are made once, when the run was (``harness.runs.loop``: the loop captured whole,
its own record and what the trace says of it) and kept in the run's meta under ``LOOP``; here
they are only shown.
"""
from __future__ import annotations

import math

from harness import schema
from harness.report import page
from harness.units import fmt_seconds, fmt_si

LOOP = "serving_loop"  # the run's meta key
# what harness.runs.loop adds to the loop's own record: each program's executions, the stream's
# time between executions (harness.step.waits' causes, HOST_S the host's, UNTOLD what the trace
# cannot tell)
PROGRAMS_RAN, BETWEEN, HOST_S, UNTOLD = "programs", "between", "host_s", "untold"

# (label, measured key, predicted key or None, formatter)
ROWS = (
    ("time to first token, median", "ttft_median_s", "ttft_s", fmt_seconds),
    ("time to first token, p90", "ttft_p90_s", "ttft_s", fmt_seconds),
    ("time per output token, median", "tpot_median_s", "tpot_s", fmt_seconds),
    ("time per output token, p90", "tpot_p90_s", "tpot_s", fmt_seconds),
    ("tokens/s", "tokens_per_s", "tokens_per_s", lambda x: fmt_si(x, "tok/s")),
    ("slot occupancy, mean", "occupancy_mean", None, lambda x: f"{x:.0%}"),
)


def of(r) -> dict | None:
    d = (getattr(r, "meta", None) or {}).get(LOOP)
    return d if isinstance(d, dict) and d else None


def _value(fmt, x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt(x)


def rows(d: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, predicted) as shown."""
    m, p = d.get("measured", {}), d.get("predicted", {})
    return [(label, _value(fmt, m.get(mk)), _value(fmt, p.get(pk)) if pk else "")
            for label, mk, pk, fmt in ROWS]


def header(d: dict) -> str:
    chip = d.get("predicted", {}).get("chip")
    return (f"serving loop: {d['requests']} requests through {d['slots']} slots, "
            f"{d['tokens_out']} tokens out in {d['generate_steps']} generate steps and "
            f"{fmt_seconds(d['wall_s'])}, {d['prefix_hits']} prefix-cache hits"
            + (f"; predicted on {chip}" if chip else "; no prediction"))


# the waits between executions that are the host's (harness.step.waits), by their word
HOST_WAITS = {schema.WAIT_DISPATCH_S: "dispatch", schema.WAIT_PYTHON_S: "python",
              schema.WAIT_INPUT_S: "input", schema.WAIT_HOST_S: "host callbacks"}
OTHER_WAITS = {schema.WAIT_CORE_S: "a core", schema.WAIT_PEERS_S: "peers",
               schema.WAIT_UNEXPLAINED_S: "unexplained"}


def programs_line(d: dict) -> str:
    """Each program's executions in the captured stream, the loop's own calls beside them, and
    its device time per execution; "" for a run without them."""
    progs, calls = d.get(PROGRAMS_RAN) or {}, d.get("calls") or {}
    if not progs:
        return ""
    each = [f"{name} {p[schema.EXECUTIONS]} executions ({calls.get(name, '-')} calls), "
            f"{fmt_seconds(p[schema.MEASURED_S])} each" for name, p in progs.items()]
    return "captured: " + "; ".join(each)


def _parts(b: dict, words: dict) -> str:
    return ", ".join(f"{w} {fmt_seconds(b[c])}" for c, w in words.items() if b.get(c, 0) > 0)


def between_lines(d: dict) -> list[str]:
    """The stream's time (first op to last, a device's, averaged over devices) split into the
    devices' ops, their waits for the host between executions and their other waits, and the
    verdict those shares give; [] for a run without them."""
    b = d.get(BETWEEN) or {}
    period = b.get(schema.PERIOD_S) or 0.0
    if period <= 0:
        return []
    host, ops = b.get(HOST_S, 0.0), period - b.get(schema.WAITING_S, 0.0)
    other = b.get(schema.WAITING_S, 0.0) - host
    out = [f"between executions: of the stream's {fmt_seconds(period)} over "
           f"{b.get(schema.EXECUTIONS, '?')} executions, the devices ran ops {fmt_seconds(ops)} "
           f"({ops / period:.0%}) and waited for the host {fmt_seconds(host)} "
           f"({host / period:.0%}: {_parts(b, HOST_WAITS) or 'none'})"
           + (f" and on other causes {fmt_seconds(other)} ({_parts(b, OTHER_WAITS)})"
              if other > 0 else "")]
    out.append(verdict(ops / period, host / period, other / period, b))
    return out + ([f"waits: {b[UNTOLD]}"] if b.get(UNTOLD) else [])


def verdict(ops: float, host: float, other: float, b: dict) -> str:
    """What bounds the loop: the largest of the stream's shares, the devices' ops, their waits
    for the host between executions and their other waits (the host first where two tie)."""
    most = max(OTHER_WAITS, key=lambda c: b.get(c, 0.0))
    said = {
        "host": f"host-bound: the devices waited for the host {host:.0%} of the stream and ran "
                f"ops {ops:.0%}: the loop's Python and the launches between programs are in "
                f"every measured time above, which the book's figures (device time) leave out",
        "ops": f"device-bound: the devices ran ops {ops:.0%} of the stream and waited for the "
               f"host {host:.0%}: the programs' own time sets the loop's pace",
        "other": f"bound by the devices' own waits: {other:.0%} of the stream ({OTHER_WAITS[most]} "
                 f"the most), against ops {ops:.0%} and the host {host:.0%}",
    }
    shares = {"host": host, "ops": ops, "other": other}
    return said[max(shares, key=shares.get)]


def details(d: dict) -> list[str]:
    """The lines under the table: the programs captured, the time between executions, the
    verdict."""
    return [x for x in (programs_line(d), *between_lines(d)) if x]


def lines(r) -> list[str]:
    """The section as text lines (none for a run without a serving loop)."""
    d = of(r)
    if d is None:
        return []
    width = max(len(label) for label, *_ in ROWS)
    out = [header(d), f"  {'figure':<{width}}  {'measured':>12}  {'predicted':>12}"]
    out += [f"  {label:<{width}}  {mv:>12}  {pv:>12}" for label, mv, pv in rows(d)]
    m = d.get("measured", {})
    out.append(f"  occupancy over generate steps: min "
               f"{_value(lambda x: f'{x:.0%}', m.get('occupancy_min'))}, max "
               f"{_value(lambda x: f'{x:.0%}', m.get('occupancy_max'))}")
    return out + [f"  {x}" for x in details(d)] + [f"  note: {n}" for n in d.get("notes", [])]


def to_markdown(r) -> str:
    d = of(r)
    if d is None:
        return ""
    table = "| figure | measured | predicted |\n|---|---|---|\n" + "".join(
        f"| {a} | {b} | {c} |\n" for a, b, c in rows(d))
    return (f"\n## Serving loop\n\n{header(d)}\n\n{table}\n"
            + "".join(f"{x}\n\n" for x in details(d))
            + "".join(f"> {n}\n>\n" for n in d.get("notes", [])))


def to_html(r) -> str:
    d = of(r)
    if d is None:
        return ""
    body = "".join(f"<tr><td class=text>{page.esc(a)}</td><td>{page.esc(b)}</td>"
                   f"<td>{page.esc(c)}</td></tr>" for a, b, c in rows(d))
    return (f"<h2>Serving loop</h2>{page.paragraphs([header(d)])}<table><thead><tr>"
            f"<th class=text>figure</th><th>measured</th><th>predicted</th></tr></thead>"
            f"<tbody>{body}</tbody></table>{page.paragraphs(details(d))}"
            f"{page.paragraphs(d.get('notes', []), 'note')}")
