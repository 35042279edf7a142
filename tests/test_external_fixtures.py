"""Profiles the harness did not capture (tests/fixtures/external, see its README), read with no
--chip, against xprof's own ``hlo_stats`` on the same file: one row per (program id, op) that
xprof lists, the same device time per row, every program that ran with its executions, and
predictions on every op that takes a visible part of the time."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from xprof_stats import hlo_stats

from harness import schema
from harness.analysis.async_pairs import left_out
from harness.runs.pipeline import analyze_trace

FIXTURES = Path(__file__).parent / "fixtures" / "external"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def xprof(tmp_path_factory):
    cache = {}

    def get(name: str) -> pd.DataFrame:
        if name not in cache:
            df = hlo_stats(FIXTURES / name, tmp_path_factory.mktemp("xprof"))
            # xprof keys rows by program id and op; its times are microseconds
            cache[name] = df.assign(program_id=df["program_id"].astype(str),
                                    total_self_s=df["total_self_time"] * 1e-6)
        return cache[name]
    return get


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(name: str):
        if name not in cache:
            # no chip named: the trace's own; every program's ops (the default is the step's)
            cache[name] = analyze_trace(FIXTURES / name, program="all")
        return cache[name]
    return get


def _joined(name, xprof, runs) -> pd.DataFrame:
    ours = runs(name).ops[[schema.PROGRAM_ID, schema.OP, schema.TOTAL_S, schema.COUNT]]
    return xprof(name).merge(ours, left_on=["program_id", "hlo_op_name"],
                             right_on=[schema.PROGRAM_ID, schema.OP], how="outer",
                             indicator=True)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_one_row_per_program_id_and_op_that_xprof_lists(name, xprof, runs):
    j = _joined(name, xprof, runs)
    assert (j["_merge"] == "both").all(), j.loc[j["_merge"] != "both",
                                                 ["program_id", "hlo_op_name", schema.OP]]


@pytest.mark.parametrize("name", NAMES)
def test_total_time_per_row_is_xprofs_total_self_time(name, xprof, runs):
    # Both sum the op's device time over every device and execution; ours keeps whole
    # nanoseconds per execution, so a row may differ by up to 0.5 ns x occurrences.
    j = _joined(name, xprof, runs)
    close = (j[schema.TOTAL_S] - j["total_self_s"]).abs() <= (
        0.02 * j["total_self_s"] + 0.5e-9 * j["occurrences"])
    assert j.loc[close, "total_self_s"].sum() >= 0.95 * j["total_self_s"].sum()


@pytest.mark.parametrize("name", NAMES)
def test_every_program_that_ran_is_listed_with_its_executions(name, xprof, runs):
    """xprof counts an op's occurrences over every device: executions x devices x the op's
    executions per program run (our ``count``). Per program, that ratio over its ops is one
    number, our ``executions``."""
    run = runs(name)
    x = xprof(name)
    programs = run.programs.set_index(schema.PROGRAM_ID)
    assert set(programs.index) == set(x["program_id"])
    j = _joined(name, xprof, runs)
    devices = run.events.groupby(schema.PROGRAM_ID, observed=True)[schema.DEVICE].nunique()
    for pid, g in j.groupby("program_id"):
        ratio = (g["occurrences"] / (g[schema.COUNT] * devices[pid])).median()
        assert programs.at[pid, schema.EXECUTIONS] == ratio, (pid, ratio)


@pytest.mark.parametrize("name", NAMES)
def test_the_time_is_on_modeled_ops_and_no_big_op_beats_its_roofline(name, runs):
    ops = runs(name).ops
    share = ops[schema.TOTAL_S] / ops[schema.TOTAL_S].sum()  # of the whole trace
    modeled = ops[schema.BOUND] != schema.UNMODELED
    assert share[modeled].sum() >= 0.95, ops.loc[~modeled, [schema.OP, schema.TOTAL_S]]
    big = ops[share >= 0.05]
    # a -done measured as its wait but priced its whole transfer (TPU) has no efficiency
    # (harness.analysis.async_pairs); every other big op has one, within its roofline
    waits = left_out(big)
    assert big.loc[waits, schema.EFFICIENCY].isna().all()
    assert (big.loc[waits, schema.OPCODE] == "copy-done").all()
    priced = big[~waits]
    assert priced[schema.EFFICIENCY].between(0.05, 1.2).all(), priced[[schema.OP,
                                                                       schema.EFFICIENCY]]


@pytest.mark.parametrize("name", NAMES)
def test_no_efficiency_is_above_ten_times_the_roofline(name, runs):
    # the roofline is a lower bound: an efficiency above 1 is impossible, and one above 10x is
    # no figure a reader can use (a 3 ns wait set against a 168 ms transfer read 5,592,405,333%)
    run = runs(name)
    shown = {"ops": run.ops[schema.EFFICIENCY], "categories": run.categories[schema.EFFICIENCY],
             "programs": run.programs[schema.EFFICIENCY],
             "summary": pd.Series([run.summary[schema.EFFICIENCY]])}
    for table, efficiency in shown.items():
        assert not (efficiency.astype(float) > 10).any(), (table, efficiency.max())


@pytest.mark.parametrize("name", NAMES)
def test_no_op_is_exposed_longer_than_its_own_measured_time(name, runs):
    # the step object's exposed part of each communication op, against the op's own time per
    # step in the OPS table (for an async -done, its wait) and its time on the timeline
    run = runs(name)
    ops = run.ops[run.ops[schema.PROGRAM_ID].astype(str) == str(run.meta[schema.PROGRAM_ID])]
    own = dict(zip(ops[schema.OP].astype(str), ops[schema.MEASURED_S]))
    listed = run.step.get(schema.STEP_COLLECTIVES) or []
    for r in listed:
        assert r[schema.EXPOSED_COMM_S] <= own[r[schema.OP]], r
        assert r[schema.EXPOSED_COMM_S] <= r[schema.COMM_S], r


def test_program_picks_one_compilation_by_id_or_every_one_by_name(capsys):
    from harness import cli

    def ids(*argv):
        assert cli.main(["trace", str(FIXTURES / "mi300x-gemm"), "--format", "json", *argv]) == 0
        return {o[schema.PROGRAM_ID] for o in json.loads(capsys.readouterr().out)["ops"]}

    # the trace holds six compilations of jit_dot (program ids 5, 21, 34, 49, 64, 79)
    assert ids("--program", "79") == {"79"}
    assert ids("--program", "jit_dot") == {"5", "21", "34", "49", "64", "79"}
    assert cli.main(["trace", str(FIXTURES / "mi300x-gemm"), "--program", "80"]) == 2
    assert "jit_dot(79)" in capsys.readouterr().err  # names the programs that did run
