"""Two sides compared (``harness compare``): the runs of each side paired and judged, one
verdict per pair and one overall, as the verdict object (JSON) and as JUnit XML.

A side is a run, a sweep or any directory of saved runs, or a run id under a results root; with
the candidate alone, its baseline is picked under the root by name (``pairs.choose``: latest, a
commit or a date). The verdict object holds the overall verdict, the headline, the rule, each
pair's verdict (``judge.Verdict.to_dict``) and the runs left unpaired; in JUnit, each pair is a
test case that a regression fails and an inconclusive or unstable verdict skips. Each pair is
judged with its point's own noise (``harness.regress.noise``) where the runs of both sides and
the history under the root hold enough runs of the same code.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness import schema
from harness.errors import HarnessError
from harness.record import store
from harness.regress import judge, noise, pairs

CONFIRMATIONS = "confirmations"  # under the root: the reruns that confirmed a regression
# the verdicts ``--confirm`` reruns: a regression, and a pair slower than the threshold that the
# noise of its runs (or a moving host) left undecided: its reruns decide it either way
SUSPECT = (judge.REGRESSION, judge.INCONCLUSIVE)


@dataclass
class Comparison:
    """The rule, one verdict per pair, the runs of each side left unpaired and the two sides'
    names (baseline, candidate)."""

    rule: judge.Rule
    verdicts: list
    only_baseline: list
    only_candidate: list
    names: tuple[str, str]

    @property
    def verdict(self) -> str:
        """The overall verdict: the worst of the pairs'."""
        return judge.overall(self.verdicts)


def load_side(ref: str, root: Path) -> list:
    """The runs of one side: at the path ``ref``, else of the run id ``ref`` under ``root``."""
    p = Path(ref)
    return pairs.load_all(p if p.exists() or p.is_absolute() or len(p.parts) > 1
                          else store.resolve(ref, root))


def compare_sides(candidate: str, baseline: str | None, root: Path, rule: judge.Rule,
                  which: str | None = None, confirm: int = 0) -> Comparison:
    """``candidate`` against ``baseline`` (each a path or a run id under ``root``), or with no
    ``baseline`` against the runs ``which`` picks under ``root`` (default the latest); with
    ``confirm``, each regression confirmed by that many reruns stored under
    ``root/confirmations`` (``harness.regress.confirm``)."""
    cand = load_side(candidate, root)
    base = load_side(baseline, root) if baseline is not None else []
    # two runs named: two layouts of one model (pairs.pair pairs them whatever they ran)
    named = baseline is not None and len(base) == 1 and len(cand) == 1
    under = [] if named else pairs.runs_under(root, [*cand, *base])  # each run read once
    if baseline is not None:
        name = baseline
    else:
        which = which or pairs.LATEST
        base, name = pairs.choose(under, which, cand, root), f"{which} under {root}"
    paired, only_b, only_c = pairs.pair(base, cand)
    if not paired:
        raise HarnessError(f"no run of {candidate} has a baseline run of the same test or "
                           f"workload in {name}")
    past = history(under, cand)
    own = {} if named else noise.spreads([past, base, cand])
    verdicts = [judge.compare(a, b, rule, layouts_first=named, spread=own.get(pairs.key(b)),
                              reps=None if named else _replicates(a, b, base, cand))
                for a, b in paired]
    if confirm > 0:
        from harness.regress import confirm as confirming  # deferred: it may run workloads

        verdicts = [confirming.rerun_pair(v, confirm, Path(root) / CONFIRMATIONS, rule,
                                          [base, past]) if v.verdict in SUSPECT else v
                    for v in verdicts]
    return Comparison(rule, verdicts, only_b, only_c, (name, candidate))


def _replicates(a, b, base: list, cand: list) -> tuple[list, list]:
    """Each side's runs of the pair's code: its repeats, judged by their mean."""
    return noise.replicates(base, a), noise.replicates(cand, b)


def history(runs: list, candidate: list) -> list:
    """The earlier runs of the candidate's keys among ``runs`` (those under ``--root``): the
    history each point's own noise is measured from (``harness.regress.noise``). The
    candidate, which may be slower, never widens its own noise: its runs, and runs made after
    its newest, are not its history; the baseline's are."""
    keys = {pairs.key(r) for r in candidate}
    mine = {r.path.resolve() for r in candidate if r.path is not None}
    newest = max((str(r.meta.get(schema.TIME, "")) for r in candidate), default="")
    return [r for r in runs if pairs.key(r) in keys
            and (r.path is None or r.path.resolve() not in mine)
            and not (newest and str(r.meta.get(schema.TIME, "")) > newest)]


def headline(verdicts: list) -> str:
    """The last line: the overall verdict, and the pairs that gave it."""
    n, worst = Counter(v.verdict for v in verdicts), judge.overall(verdicts)
    named = [v.name for v in verdicts if v.verdict == worst][:5] if worst != judge.OK else []
    return (f"{worst.upper()}: " + ", ".join(f"{n[k]} {k}" for k in judge.VERDICTS if n[k])
            + f" of {len(verdicts)} pair(s)" + (f" ({', '.join(named)})" if named else ""))


def verdict_object(c: Comparison, top: int) -> dict:
    """The verdict object (``--json``, ``--format json``); each pair with its ``top`` ops."""
    rule = c.rule
    return {schema.VERDICT: c.verdict, "headline": headline(c.verdicts),
            "baseline": c.names[0], "candidate": c.names[1],
            "rule": {"fail_on": dict(rule.fail_on), "alpha": rule.alpha, "host": rule.host,
                     "noise": rule.noise},
            "pairs": [v.to_dict(top) for v in c.verdicts],
            "unpaired": {"baseline": [str(r.path) for r in c.only_baseline],
                         "candidate": [str(r.path) for r in c.only_candidate]}}


def junit(verdicts) -> str:
    """One test case per pair: a regression fails, an inconclusive one is skipped."""
    n = Counter(v.verdict for v in verdicts)
    suite = ET.Element("testsuite", name="harness compare", tests=str(len(verdicts)),
                       failures=str(n[judge.REGRESSION]),
                       skipped=str(n[judge.INCONCLUSIVE] + n[judge.UNSTABLE]))
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname="harness.analysis.gaps", name=v.name)
        tag = {judge.REGRESSION: "failure", judge.INCONCLUSIVE: "skipped",
               judge.UNSTABLE: "skipped"}.get(v.verdict)
        if tag:
            ET.SubElement(case, tag, message=f"{v.verdict} ({v.cause})").text = v.message
        ET.SubElement(case, "system-out").text = f"{v.verdict} ({v.cause}): {v.message}"
    return ET.tostring(suite, encoding="unicode") + "\n"
