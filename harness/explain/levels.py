"""The network level that binds a collective, in words (``harness explain``'s reasons and
``harness plan``'s levels column): a ``predictions.levels.LevelTime`` on its system
(``predictions.network``; docs/networks.md).
"""
from __future__ import annotations

from predictions.network import System


def binding_text(t, s: System) -> str:
    """The level that sets a ``predictions.levels.LevelTime`` on ``s``, in words: "crosses 32
    nodes: leaf, 400 GB/s per node shared by 8 groups", "within one node: 8 GPUs over
    NVLink, 450 GB/s per GPU"; "" when it crosses no link."""
    from harness.units import fmt_si

    c = next((c for c in t.crossings if c.level == t.binding), None)
    if c is None:
        return ""
    lv = s.level(c.level)
    w = fmt_si(lv.bytes_per_s, "B/s")
    if lv is s.levels[0]:
        unit, link = ("slice", "ICI") if lv.kind == "ici" else (lv.name, "NVLink")
        return f"within one {unit}: {c.D} {lv.child}s over {link}, {w} per {lv.child}"
    shared = f" shared by {c.G} groups" if c.G > 1 else ""
    return f"crosses {c.D} {lv.child}s: {lv.name}, {w} per {lv.child}{shared}"
