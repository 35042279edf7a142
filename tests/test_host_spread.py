"""A shared host's calibration (issue 50): the matmul probes measured in a slower spell of the
cores run again within a budget (``harness.chip.spells``), the spread of the cores' speed is
stored, and a figure priced from it that lands above the roofline by less than that spread is
marked within it (``~``), not as beating the roof (``!``). Expected values are worked by hand."""
import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness import schema
from harness.analysis.gaps import (
    ROOFLINE_MARGIN,
    beats_roofline,
    ops_beating_roofline,
    within_spread,
)
from harness.chip import calibration as C
from harness.chip import spells
from harness.chip.drift import CORE_SPREAD
from harness.record import Run
from harness.report import document, tables
from harness.sweep import report as sweep_report

FIXTURE = Path(__file__).parent / "fixtures" / "cpu_calibration" / "cpu-8.json"


# --- the repeats ---------------------------------------------------------------------------------
class Clock:
    """A clock that moves only when a probe runs: by that probe's seconds."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_probe_beside_a_slow_check_is_slow_and_the_cheapest_runs_first():
    """Checks 80, 40, 80 G: fastest 80, slow below 80 / 1.3 = 61.5. Probe a ran between 80 and
    40 (slow), b between 40 and 80 (slow), c after the last 80 alone (fast)."""
    s = spells.Spells(lambda: 0.0)
    s.checks = [80e9, 40e9, 80e9]
    s.add(("a",), "sa", 3.0)
    s.ran[-1].after = 1
    s.add(("b",), "sb", 1.0)
    s.ran[-1].after = 2
    s.add(("c",), "sc", 2.0)
    assert [s.beside(r) for r in s.ran] == [40e9, 40e9, 80e9]
    assert [r.task for r in s.slow()] == [("b",), ("a",)]  # 1 s before 3 s
    assert s.spread == pytest.approx(2.0)
    assert 80e9 / 40e9 > CORE_SPREAD


def test_repeats_keep_within_their_budget_and_stop_once_every_probe_saw_a_fast_spell():
    """Budget 5 s. First pass: checks 80 | a (1 s) | 40 | b (2 s) | 40 | big (20 s) | 80: all
    three slow (a and b beside 40; big between 40 and 80). Round 1, cheapest first: a (1 s, 1 <=
    5), b (1 + 2 = 3 <= 5), big (3 + 20 > 5: not started); checks read 80 before a, 80 before
    b, 80 after. a and b are now fast; round 2 would have only big, which does not fit: it stops.
    Checks 80, 40, 40, 80, 80, 80, 80: spread 80 / 40 = 2.0."""
    clock = Clock()
    seconds = {"a": 1.0, "b": 2.0, "big": 20.0}
    s = spells.Spells(lambda: next(reads))
    reads = iter([80e9, 40e9, 40e9, 80e9])
    for name in ("a", "b", "big"):
        s.check()
        s.add((name,), f"first {name}", seconds[name])
    s.check()
    reads = iter([80e9] * 3)

    def run(task):
        clock.t += seconds[task[0]]
        return f"again {task[0]}"

    out = spells.repeat(s, run, budget_s=5.0, clock=clock)
    assert out == ["again a", "again b"] and clock.t == 3.0
    assert [r.task for r in s.slow()] == [("big",)]
    assert s.checks == [80e9, 40e9, 40e9, 80e9, 80e9, 80e9, 80e9] and s.spread == 2.0


def test_repeats_run_no_more_rounds_than_allowed():
    """A probe that stays in a slow spell (every check before it 40, after it 80) runs again
    once a round, ROUNDS times, then keeps the best it has."""
    s = spells.Spells(lambda: next(reads))
    reads = iter([40e9, 80e9] + [40e9, 80e9] * spells.ROUNDS)
    s.check()
    s.add(("a",), "first", 0.1)
    s.check()
    out = spells.repeat(s, lambda task: "again", budget_s=60.0, clock=Clock())
    assert out == ["again"] * spells.ROUNDS and len(s.checks) == 2 + 2 * spells.ROUNDS


# --- the record and the chip ---------------------------------------------------------------------
def test_older_records_load_a_record_before_the_core_check_with_no_spread():
    """The fixture (made before the core-speed check: no core_speed) loads with no spread and
    no repeats, and its chip has none; a record of the check without the spread field (commit
    28ef246 to issue 50) gets its spread from its core_speed range: 80 / 50 = 1.6."""
    old = C.load(FIXTURE)
    assert old.core_speed == () and old.spread == 0.0 and old.repeats == 0
    assert C.to_chip(old).spread == 0.0 and math.isnan(old.core_spread)
    d = json.loads(FIXTURE.read_text())
    d["core_speed"] = [50e9, 80e9]
    assert "spread" not in d and C.Calibration.from_dict(d).spread == pytest.approx(1.6)
    # what a run's meta keeps of it (no samples), read by the report
    assert spells.spread_of(d) == pytest.approx(1.6)
    assert spells.spread_of({**d, "spread": 1.3}) == 1.3
    assert math.isnan(spells.spread_of(None)) and math.isnan(spells.spread_of({}))


# --- what a figure priced from it shows ----------------------------------------------------------
SPREAD = 1.3


def test_the_roof_limit_is_the_margin_or_the_spread_where_wider():
    """Spread 1.3: 115% is within it (above the 110% margin, at most 130%), 140% beats the roof;
    105% is within the margin, unmarked. A spread under the margin (1.05) or none changes
    nothing: 115% beats the roof."""
    assert within_spread(1.15, SPREAD) and not beats_roofline(1.15, SPREAD)
    assert beats_roofline(1.40, SPREAD) and not within_spread(1.40, SPREAD)
    assert not within_spread(1.05, SPREAD) and not beats_roofline(1.05, SPREAD)
    assert within_spread(SPREAD, SPREAD)  # at the spread: within it
    for none in (math.nan, 0.0, 1.05):
        assert beats_roofline(1.15, none) and not within_spread(1.15, none)
    assert ROOFLINE_MARGIN < 1.15 < SPREAD < 1.40


def _ops() -> pd.DataFrame:
    """Three matmul ops: 115%, 140% and 50% of their roofs (predicted / measured), a third of
    the step each."""
    measured = [1e-3, 1e-3, 1e-3]
    predicted = [1.15e-3, 1.40e-3, 0.5e-3]
    return pd.DataFrame({
        schema.OP: ["fusion.1", "fusion.2", "fusion.3"], schema.CATEGORY: ["matmul"] * 3,
        schema.BOUND: ["compute"] * 3, schema.COUNT: [1] * 3, schema.MEASURED_S: measured,
        schema.PREDICTED_S: predicted,
        schema.EFFICIENCY: [p / m for p, m in zip(predicted, measured)],
        schema.GAP_S: [m - p for p, m in zip(predicted, measured)], schema.SHARE: [1 / 3] * 3})


def _run(calibration: dict | None) -> Run:
    meta = {schema.CHIP: "cpu", **({schema.CALIBRATION: calibration} if calibration else {})}
    categories = pd.DataFrame({schema.CATEGORY: ["matmul"], schema.OPS_COUNT: [3],
                               schema.MEASURED_S: [3e-3], schema.PREDICTED_S: [3.05e-3],
                               schema.UNMODELED_S: [0.0], schema.EFFICIENCY: [3.05 / 3],
                               schema.SHARE: [1.0]})
    return Run(title="matmuls", meta=meta, ops=_ops(), categories=categories,
               summary={schema.EFFICIENCY: 3.05 / 3})


def test_an_op_within_the_spread_is_marked_within_it_and_one_beyond_it_flagged():
    """A run priced from a calibration with a 1.3x spread: the op at 115% reads "115~", the
    one at 140% "140!", the one at 50% "50"; the legend says what ~ means, with 1.30x."""
    run = _run({"core_speed": [50e9, 65e9], "spread": SPREAD})
    text = document.to_text(run)
    assert "115" + tables.WITHIN in text and "140" + tables.FLAG in text
    assert "115" + tables.FLAG not in text and "50" + tables.WITHIN not in text
    legend = " ".join(text.split())  # the text legend is wrapped
    assert f"{tables.WITHIN} above the roofline by less than the host's spread, 1.30x" in legend
    md = document.to_markdown(run, plots=False)
    assert "| 115~ |" in md and "| 140! |" in md and "1.30x" in md
    # the summary's efficiency, 3.05 / 3 = 102%, is under the margin: unmarked
    assert "efficiency: 102%" in text or "efficiency: 101.7%" in text
    # no spread (an older record, or a data-sheet chip): both beat the roof, as before
    plain = document.to_text(_run(None))
    assert "115" + tables.FLAG in plain and "140" + tables.FLAG in plain
    assert tables.WITHIN + " above the roofline" not in plain


def test_json_and_csv_keep_the_figures_and_the_meta_the_spread():
    run = _run({"core_speed": [50e9, 65e9], "spread": SPREAD})
    out = json.loads(document.render(run, "json"))
    assert [o[schema.EFFICIENCY] for o in out["ops"]] == pytest.approx([1.15, 1.40, 0.5])
    assert out["meta"][schema.CALIBRATION]["spread"] == SPREAD
    csv = document.render(run, "csv")
    assert "~" not in csv and "!" not in csv


def test_the_run_note_names_only_the_ops_beyond_the_spread():
    """The analysis's note on ops beating the roofline: with the chip's 1.3x spread only
    fusion.2 (140%); without, fusion.1 (115%) too."""
    assert ops_beating_roofline(_ops(), spread=SPREAD) == "1 op(s) (fusion.2)"
    assert ops_beating_roofline(_ops()) == "2 op(s) (fusion.1, fusion.2)"


def test_a_sweep_marks_its_points_within_the_hosts_spread():
    """Two matmul points on a calibration with a 1.3x spread: 115% is marked ~ and left out of
    the notes on figures beating the roof; 140% is flagged and named there."""
    rows = [{schema.POINT: i + 1, schema.WORKLOAD: "matmul", schema.OVERRIDES: f"B={b}",
             schema.CHIP: "cpu", schema.STATUS: "done", schema.RUN: "",
             schema.MATMUL_EFFICIENCY: eff, schema.HOST_SPREAD: SPREAD}
            for i, (b, eff) in enumerate([(256, 1.15), (1024, 1.40)])]
    df = pd.DataFrame(rows).reindex(columns=list(schema.SWEEP_SUMMARY))
    assert sweep_report.spread(df) == SPREAD
    md = sweep_report.to_markdown({"name": "quick"}, df, [])
    assert "115~" in md and "140!" in md and "1.30x" in md
    notes = sweep_report.impossible_notes(df)
    assert notes[0] == "point 2 (matmul B=1024): matmul_efficiency 140%"
    assert "above 130% and the host's spread" in notes[1] and len(notes) == 2
    assert "1 figure(s) above it, flagged; 1 within the host's 1.30x spread" in \
        sweep_report.headline(df)[0]
    # a data-sheet chip's sweep: no spread, both flagged
    gpu = df.assign(**{schema.CHIP: "h100", schema.HOST_SPREAD: math.nan})
    assert math.isnan(sweep_report.spread(gpu))
    assert "115!" in sweep_report.to_markdown({"name": "quick"}, gpu, [])


def test_a_calibrated_chip_carries_the_spread_and_drift_keeps_it():
    from harness.chip import drift

    cal = dataclasses.replace(C.load(FIXTURE), core_speed=(50e9, 65e9), spread=SPREAD)
    chip = C.to_chip(cal)
    assert chip.spread == SPREAD and drift.scaled(chip, 0.8).spread == SPREAD
