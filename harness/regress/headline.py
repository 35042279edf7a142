"""The line that opens ``harness compare`` of two layouts: which one is slower, by how much,
and what the step difference is made of (``harness.regress.side_by_side.attribute``), its
parts with their signs, negative ones included, adding up to the difference."""
from __future__ import annotations

from harness.units import fmt_seconds

SMALL = 0.01  # a part under this share of the step difference is counted in "smaller parts"
SHOWN = 4  # parts the line names; the others are summed
ROUNDING = 1e-12  # seconds: a part this small is the float sums' rounding, not a part


def line(ta: float, tb: float, attribution: list, sign: float, within: str = "") -> str:
    """``B is 1.8x slower than A (step 3.0 ms -> 5.4 ms): +2.1 ms exposed all-gather from
    ...; -300 us compute``: the slower layout first (``sign`` +1: B, -1: A), then the parts of
    the difference (``parts``). ``ta``, ``tb``: each layout's measured step. ``within``: why the
    verdict did not call it slower ("within the noise of one run a side"): then ``B measured
    1.2x slower than A, within ...``, so that the line never says slower beside an ok."""
    if not (ta > 0 and tb > 0):
        return "no measured step in both runs (the step object) to tell which layout is slower"
    slow, fast = ("B", "A") if sign > 0 else ("A", "B")
    ratio = max(ta, tb) / min(ta, tb)
    head = ("A and B take the same step (within 0.5%)" if ratio < 1.005 else
            f"{slow} measured {ratio:.3g}x slower than {fast}, {within}" if within else
            f"{slow} is {ratio:.3g}x slower than {fast}") + (
        f" (step {fmt_seconds(ta)} -> {fmt_seconds(tb)})")
    return head + (": " + said(parts(attribution, abs(tb - ta))) if attribution else "")


def parts(attribution: list, difference: float) -> list[tuple[str, float]]:
    """The line's parts: the ``SHOWN`` largest in size (above ``SMALL`` of the difference),
    the greater first, then the others summed as one (a single one by its name), so that they
    add up as all of them do."""
    big = sorted((p for p in attribution if abs(p[1]) > SMALL * difference),
                 key=lambda p: -abs(p[1]))[:SHOWN]
    rest = [p for p in attribution if p not in big]
    left = sum(s for _, s in rest)
    shown = sorted(big, key=lambda p: -p[1])
    if len(rest) == 1:
        shown += rest
    elif rest and abs(left) > ROUNDING:
        shown.append((f"{len(rest)} smaller parts", left))
    return shown


def said(shown: list[tuple[str, float]]) -> str:
    """``+2.1 ms exposed all-gather ...; -300 us compute``: each part with its sign."""
    return "; ".join(f"{'+' if s >= 0 else '-'}{fmt_seconds(abs(s))} {w}" for w, s in shown)
