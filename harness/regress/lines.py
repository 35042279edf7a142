"""The line each verdict says (``Verdict.message``): one function per cause of
``harness.regress.judge.CAUSES``, each made from the pair's evidence
(``harness.regress.evidence``), and the two layouts' line around it
(``harness.regress.headline``). The figures behind every line: ``stats``; the host: ``probe``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from harness import schema
from harness.regress import changes, figures
from harness.regress.figures import TRACED, WALL
from harness.units import fmt_seconds

if TYPE_CHECKING:
    from harness.regress.evidence import Evidence, Probe
    from harness.regress.side_by_side import Layouts

RERUN = "rerun on a steady host to tell"
DECIDE = ("to decide, give each side more runs of its code (harness sweep --repeat 3) or "
          "confirm the candidate (harness compare --confirm 3)")


def stats(e: Evidence) -> str:
    """The figures behind a verdict: the wall step (or the traced step of two layouts), the
    CPU time per step, which figure decided and why, and the noise term used."""
    f = e.measured
    if not math.isfinite(f.step):
        return "no step times to compare"
    wall = (f"wall step {fmt_seconds(float(np.median(f.walls_a)))} -> "
            f"{fmt_seconds(float(np.median(f.walls_b)))}" if len(f.walls_a) and len(f.walls_b)
            else "")
    if f.decided == TRACED:
        return (f"{TRACED} {math.expm1(f.step):+.0%} (p={e.p_value:.2g}; decided by the "
                f"{TRACED}, the step the layouts' line breaks down){', ' + wall if wall else ''}"
                f"; noise: {f.noise['said']}")
    cpu = f", CPU time per step {math.expm1(f.cpu):+.0%}" if math.isfinite(f.cpu) else ""
    why = (f"; decided by the {WALL}: the CPU time per step grew while the wall step got "
           "faster (threads spinning while they wait)" if e.spun else "")
    return (f"{wall} ({math.expm1(f.step):+.0%}, p={e.p_value:.2g}){cpu}{why}; "
            f"noise: {f.noise['said']}")


def probe(p: Probe) -> str:
    """``host speed -3% (probe; +8% during the candidate)``, or that there was no probe."""
    if not p.probed:
        return "no host speed probe"
    return (f"host speed {math.expm1(-p.speed):+.0%} (probe; "
            f"{math.expm1(-p.candidate_moved):+.0%} during the candidate)")


def _where(e: Evidence) -> str:
    """``; compute +3.5 ms; ...; most in fusion.1 ...``: where the time went
    (``changes.where``), "" where no op says."""
    mesh = e.candidate.meta.get(schema.MESH)
    there = (changes.where(e.step_figures, e.ops, mesh if isinstance(mesh, dict) else None)
             if len(e.ops) else "")
    return f"; {there}" if there else ""


def runs_a_side(e: Evidence) -> str:
    """``one run a side``, or ``3 and 3 runs``: what each side's figure is the mean of."""
    na, nb = e.measured.noise["replicates"]
    return f"{na} and {nb} runs" if (na, nb) != (1, 1) else "one run a side"


def within(e: Evidence) -> str:
    """Why the step's change did not decide: ``within the noise of one run a side`` (not
    significant at alpha), ``under the 10% threshold``, or "" (it did: the host explains it)."""
    f = e.measured
    r = abs(f.step)
    if not math.isfinite(r) or f.step_se > 0 and figures.tail(r / f.step_se, e.df) > e.alpha:
        return f"within the noise of {runs_a_side(e)}"
    return f"under the {e.step_threshold:.0%} threshold" if r <= math.log1p(
        e.step_threshold) else ""


def added(e: Evidence) -> str:
    """``+4 all-reduces, +8.8 ms exposed``: the collectives the candidate's program runs more
    of per step than the baseline's, and the step's exposed communication that grew with them;
    "" where it adds none."""
    ca, cb = e.program["collectives"]
    grown = {k: cb[k] - ca.get(k, 0) for k in sorted(cb) if cb[k] > ca.get(k, 0)}
    more = [f"+{n} {k}{'s' if n > 1 else ''}" for k, n in grown.items()]
    d = e.step_figures.set_index(schema.FIGURE)[schema.DELTA_S] if len(e.step_figures) else {}
    grew = d.get(schema.EXPOSED_COMM_S, math.nan) if len(d) else math.nan
    if more and changes.finite(grew) and grew > 0:
        more.append(f"+{fmt_seconds(grew)} exposed")
    return ", ".join(more)


def _changed(e: Evidence) -> str:
    """``the program changed: +4 all-reduces, +8.8 ms exposed (collectives all-reduce 0 -> 4;
    0.86x the HBM bytes per device)``: what it adds first, then all that changed."""
    more = added(e)
    return (f"the program changed: {more} ({e.program['what']})" if more else
            f"the program changed: {e.program['what']}")


def no_step_times(e: Evidence) -> str:
    return stats(e)


def unstable(e: Evidence) -> str:
    """Its own spread against the threshold, and the runs a side it would take to tell that
    change (z(alpha) s sqrt(2/n) within it)."""
    noise, runs = e.measured.noise, runs_a_side(e)
    return (f"{changes.said(e.program)}unstable: runs of the same code spread {noise['s']:.3g} "
            f"(SD of the log {noise['figure']}), too wide to tell a change of "
            f"{e.step_threshold:.0%} with {runs}; repeat it (harness sweep --repeat) or quiet its "
            f"host: {stats(e)}; {probe(e.probe)}")


def spun_on_a_moving_host(e: Evidence) -> str:
    return (f"{changes.said(e.program)}{stats(e)}: the CPU time per step grew while the wall "
            f"step got faster, on a host that moved ({probe(e.probe)}): {RERUN}")


def changed_within_noise(e: Evidence) -> str:
    return (f"{_changed(e)}; measured {math.exp(e.measured.step):.3g}x slower, {within(e)}: "
            f"{stats(e)}; {probe(e.probe)}; {DECIDE}")


def not_worse(e: Evidence) -> str:
    """``not slower beyond noise: ...``; measured slower than the threshold, how to decide."""
    told = (f"; measured {math.exp(e.measured.step):.3g}x slower, {within(e)}: {DECIDE}"
            if e.measured_slower and within(e) else "")
    return (f"{changes.said(e.program)}{'faster' if e.faster else 'not slower beyond noise'}: "
            f"{stats(e)}; {probe(e.probe)}{told}")


def more_work(e: Evidence) -> str:
    """``the program does more work: 1.5x the FLOPs per device; ...``; a program that adds
    collectives opens with them: ``slower: the program changed: +4 all-reduces, +8.8 ms
    exposed (...)``."""
    if added(e) and not e.program["same_program"]:
        return f"slower: {_changed(e)}; {stats(e)}{_where(e)}"
    what = ("the same program (fingerprint) did more work per step"
            if e.program["same_program"] else "the program does more work")
    return f"{what}: {e.program['what']}; {stats(e)}{_where(e)}"


def slower_cores(e: Evidence) -> str:
    return (f"{stats(e)}, but the host's cores ran as much slower "
            f"({math.expm1(-e.probe.cores):+.0%}: the probe's FLOPs per CPU second): {RERUN}")


def host_moved_under_it(e: Evidence) -> str:
    return (f"{stats(e)}: the same program took more CPU time per step while the host moved "
            f"under it ({probe(e.probe)}): its device threads wait longer, spinning, on a "
            f"busier host; {RERUN}")


def same_cpu_work(e: Evidence) -> str:
    return (f"{stats(e)}: the same CPU work per step: other processes took more of the host, "
            "or the program waits longer (idle, exposed communication), which the wall step "
            f"alone cannot tell ({probe(e.probe)})")


def host_moved(e: Evidence) -> str:
    return f"{stats(e)}: the host moved, as much as the step can tell ({probe(e.probe)})"


def slower(e: Evidence) -> str:
    """``same program, slower by 50% (more CPU time per step): ...``: each metric crossed, by
    how much (the step by the CPU time per step where that decided it)."""
    x, cpu = e.log_changes, e.measured.cpu
    lost = ", ".join(f"{'slower' if m == 'step' else 'less efficient'} by "
                     f"{math.expm1(max(x[m], cpu) if m == 'step' and e.busier else x[m]):.0%}"
                     for m in e.crossed)
    how = (" (more CPU time per step)" if e.busier else f" (the {TRACED})" if e.traced else "")
    return (f"{changes.said(e.program) or 'same program, '}{lost}{how}: {stats(e)}; "
            f"{probe(e.probe)}{_where(e)}")


def with_layouts(message: str, layouts: Layouts | None, first: bool) -> str:
    """Two layouts' line (``Layouts.headline``) before the verdict's (``first``: two runs named
    as two layouts of one model), else after it."""
    if layouts is None:
        return message
    if first:
        return f"{layouts.headline}. {message[:1].upper()}{message[1:]}"
    return f"{message}. {layouts.headline}"
