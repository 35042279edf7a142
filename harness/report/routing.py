"""A run's routing section (an MoE, issue 54 part 3): tokens per expert per layer (min, median,
max, the busiest expert), the imbalance max/mean, dropped token-choices and their share, the
routed matmuls priced at what they computed with the routed FLOPs from the routing statistics
beside them (book §5.4) and the waste, and the routing straggler of a tiled expert loop.

The figures are made once when the run is (``harness.step.routing.of_built``, called by
``harness.runs.workload``) and kept in the run's meta under ``ROUTING``; here they are shown.
"""
from __future__ import annotations

import math

from harness.report import page
from harness.step.routing import ROUTING, imbalance_line
from harness.units import fmt_si

LAYER_HEAD = ("layer", "tokens/expert min", "median", "max", "busiest", "imbalance",
              "dropped", "drop share", "balance loss")
MATMUL_HEAD = ("op", "form", "count", "flops", "routed flops", "waste")


def of(r) -> dict | None:
    d = (getattr(r, "meta", None) or {}).get(ROUTING)
    return d if isinstance(d, dict) and d.get("layers") else None


def header(d: dict) -> str:
    cap = f", capacity factor {d['capacity_factor']:g}" if d.get("capacity_factor") else ""
    return (f"routing: E={d['E']} experts, k={d['k']} a token, over Z={d['Z']} expert "
            f"device(s), {d['experts_impl']}{cap}: {d['tokens']} tokens a step, "
            f"{d['tokens'] * d['k']} token-choices a layer")


def layer_rows(d: dict) -> list[tuple[str, ...]]:
    return [(str(i), str(l_["min"]), f"{l_['median']:g}", str(l_["max"]),
             f"expert {l_['busiest']}", f"{l_['imbalance']:.2f}x", str(l_["dropped"]),
             f"{l_['drop_share']:.1%}", f"{l_['balance_loss']:.3f}")
            for i, l_ in enumerate(d["layers"])]


def _waste(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def matmul_rows(d: dict) -> list[tuple[str, ...]]:
    return [(m["op"], m["form"], str(m["count"]), fmt_si(m["flops"], "FLOP"),
             fmt_si(m["routed_flops"], "FLOP"), _waste(m["waste"])) for m in d["matmuls"]]


def summary(d: dict) -> list[str]:
    passes = "3 passes, training" if d.get("training") else "forward"
    out = [f"routed FLOPs per step: {fmt_si(d['routed_flops'], 'FLOP')} in all, "
           f"{fmt_si(d['routed_flops'] / d['devices_batch'], 'FLOP')} a device of the "
           f"{d['devices_batch']} the batch is split over "
           f"(2·(tokens·k − dropped)·D·F·3 matrices, {passes}; book §5.4)"]
    if d.get("matmuls"):
        out.append("routed matmuls per device: FLOPs as computed; routed FLOPs from the "
                   "routing statistics (each expert's real tokens); waste = 1 − routed/computed")
    if d.get("imbalance"):
        out.append(imbalance_line(d["imbalance"]))
    return out


def _text_table(head, rows) -> list[str]:
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return ["  " + "  ".join(f"{x:>{n}}" for x, n in zip(r, w)) for r in [head, *rows]]


def lines(r) -> list[str]:
    """The section as text lines (none for a run without routing)."""
    d = of(r)
    if d is None:
        return []
    out = [header(d), *_text_table(LAYER_HEAD, layer_rows(d))]
    if d.get("matmuls"):
        out += _text_table(MATMUL_HEAD, matmul_rows(d))
    return out + summary(d)


def _md_table(head, rows) -> str:
    return ("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
            + "".join("| " + " | ".join(r) + " |\n" for r in rows))


def to_markdown(r) -> str:
    d = of(r)
    if d is None:
        return ""
    mm = f"\n{_md_table(MATMUL_HEAD, matmul_rows(d))}" if d.get("matmuls") else ""
    return (f"\n## Routing\n\n{header(d)}\n\n{_md_table(LAYER_HEAD, layer_rows(d))}{mm}\n"
            + "".join(f"{line}\n\n" for line in summary(d)))


def _html_table(head, rows) -> str:
    th = "".join(f"<th>{page.esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{page.esc(x)}</td>" for x in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def to_html(r) -> str:
    d = of(r)
    if d is None:
        return ""
    mm = _html_table(MATMUL_HEAD, matmul_rows(d)) if d.get("matmuls") else ""
    return (f"<h2>Routing</h2>{page.paragraphs([header(d)])}"
            f"{_html_table(LAYER_HEAD, layer_rows(d))}{mm}{page.paragraphs(summary(d))}")


def to_json(r) -> dict:
    """The section for the JSON report ({} for none): the figures and the lines."""
    d = of(r)
    return dict(d, lines=summary(d)) if d is not None else {}
