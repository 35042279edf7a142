"""A run's serving-loop section (``llama_generate``, issue 55): the request stream's measured
time to first token, time per output token (median and p90), tokens/s and slot occupancy, each
beside the book's prediction for the chip the run was predicted on, with the counts (requests,
tokens out, prefix-cache hits) and the loop's notes.

The figures are the workload's (``workloads.llama.generate_loop.figures``), made once when the
run was (``harness.runs.workload`` calls the workload record's ``loop``) and kept in the run's
meta under ``LOOP``; here they are only shown.
"""
from __future__ import annotations

import math

from harness.report import page
from harness.units import fmt_seconds, fmt_si

LOOP = "serving_loop"  # the run's meta key

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
    return out + [f"  note: {n}" for n in d.get("notes", [])]


def to_markdown(r) -> str:
    d = of(r)
    if d is None:
        return ""
    table = "| figure | measured | predicted |\n|---|---|---|\n" + "".join(
        f"| {a} | {b} | {c} |\n" for a, b, c in rows(d))
    return (f"\n## Serving loop\n\n{header(d)}\n\n{table}\n"
            + "".join(f"> {n}\n>\n" for n in d.get("notes", [])))


def to_html(r) -> str:
    d = of(r)
    if d is None:
        return ""
    body = "".join(f"<tr><td class=text>{page.esc(a)}</td><td>{page.esc(b)}</td>"
                   f"<td>{page.esc(c)}</td></tr>" for a, b, c in rows(d))
    return (f"<h2>Serving loop</h2>{page.paragraphs([header(d)])}<table><thead><tr>"
            f"<th class=text>figure</th><th>measured</th><th>predicted</th></tr></thead>"
            f"<tbody>{body}</tbody></table>{page.paragraphs(d.get('notes', []), 'note')}")
