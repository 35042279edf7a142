"""Reports a person reads at a glance: one unit per column named in its header, every shown
figure defined once (``schema.GLOSSARY``), figures that do not apply left out, figures above the
roofline flagged, titles that say what ran, tables that fit a terminal or keep one line per row,
and plot labels that never overlap."""
import math
import random
import re
from types import SimpleNamespace

import pandas as pd
import pytest

import workloads
from harness import schema
from harness.analysis.gaps import ROOFLINE_MARGIN, summary
from harness.report import document, heading, plots, tables
from harness.sweep import report as sweep_report
from predictions import hardware


def _cells(df):
    cols, rows = tables.cells(df)
    return [c.label for c in cols], rows


def test_one_unit_per_column_named_in_its_header():
    # a column reads in the largest unit its biggest value reaches 1 in while its median stays
    # above 0.3 of one: with a median of 0.143 ms, not ms but us (1.93 ms = 1930 us)
    labels, rows = _cells(pd.DataFrame({schema.MEASURED_S: [1.93e-3, 1.43e-4, 2.54e-5]}))
    assert labels == ["measured (us)"] and [r[0] for r in rows] == ["1930", "143", "25.4"]
    # with a median of 0.8 ms, the same column reads in ms
    labels, rows = _cells(pd.DataFrame({schema.MEASURED_S: [1.93e-3, 8e-4, 2.54e-5]}))
    assert labels == ["measured (ms)"] and [r[0] for r in rows] == ["1.93", "0.800", "0.0254"]
    # a step column spanning 248 us to 1.08 s reads in ms (its median, 5 ms)
    labels, rows = _cells(pd.DataFrame({schema.STEP_S: [2.48e-4, 5e-3, 1.08]}))
    assert labels == ["step (ms)"] and [r[0] for r in rows] == ["0.248", "5.00", "1080"]
    # fractions in percent, bandwidth in GB/s, bytes in binary units: 4096 B = 4 KiB
    labels, rows = _cells(pd.DataFrame({schema.EFFICIENCY: [0.78, 0.0038],
                                        schema.MEASURED_BUS_GBPS: [0.0572, 1.73],
                                        schema.MESSAGE_BYTES: [4096, 65536]}))
    assert labels == ["efficiency (%)", "measured_bus (GB/s)", "message (KiB)"]
    assert rows == [["78", "0.0572", "4.00"], ["0.38", "1.73", "64.0"]]


def test_percentages_and_ratios_are_not_mixed_in_the_sweep_table():
    # every fraction-like figure of a sweep row reads as a percentage
    for c in (schema.EFFICIENCY, schema.MATMUL_EFFICIENCY, schema.MFU, schema.COVERAGE,
              schema.HOST_SPEED):
        assert tables.column(c, pd.Series([1.0])).unit == "%"


def test_figures_above_the_roofline_are_flagged_where_they_stand():
    df = pd.DataFrame({schema.EFFICIENCY: [1.57, ROOFLINE_MARGIN, 0.5],
                       schema.SHARE: [1.57, 1.57, 1.57]})  # a share is no roofline fraction
    _, rows = _cells(df)
    assert [r[0] for r in rows] == ["157" + tables.FLAG, "110", "50"]
    assert all(not r[1].endswith(tables.FLAG) for r in rows)


def test_every_shown_column_and_figure_has_a_meaning():
    shown = (set(sweep_report.SHOWN) | set(document.OP_COLUMNS) | set(document.CATEGORY_COLUMNS)
             | set(document.PROGRAM_COLUMNS) | set(schema.FIGURES))
    explained = {schema.FLOPS_VS_COST_ANALYSIS, schema.FLOPS_VS_COST_ANALYSIS_LOOPS_ONCE}
    missing = sorted(c for c in shown - explained if c not in schema.GLOSSARY)
    assert missing == []
    assert all(0 < len(v) <= 170 and "\n" not in v for v in schema.GLOSSARY.values())
    names = [k for k, _ in tables.legend([schema.STEP_S, "not_a_column", schema.EFFICIENCY])]
    assert names == ["step", "efficiency"]


def test_a_figure_that_does_not_apply_is_left_out():
    # a collective's step does no FLOPs: no model FLOPs, no MFU, no HFU (not 0%)
    stored = {schema.STEP_S: 1e-3, schema.MODEL_FLOPS: 0, schema.MFU: 0.0,
              schema.HLO_FLOPS_PER_DEVICE: 0.0, schema.HFU: 0.0, schema.EFFICIENCY: 0.5,
              schema.ANALYTIC_S: math.nan}
    assert [k for k, _ in document.figures(stored)] == [schema.STEP_S, schema.EFFICIENCY]
    ops = pd.DataFrame({schema.OP: ["all-gather.1"], schema.CATEGORY: [schema.CAT_COLLECTIVE],
                        schema.COUNT: [1], schema.MEASURED_S: [2e-5], schema.PREDICTED_S: [1e-5],
                        schema.FLOPS: [0.0], schema.BOUND: ["comm"]})
    s = summary(ops, step_s=2e-5, peak_flops_per_s=1e12, devices=8, model_flops=0.0,
                analytic_s=1e-5, bus_bytes=7168.0)
    assert schema.MFU not in s and schema.MODEL_FLOPS not in s
    # bus bandwidth: the bytes each device moves over links / the time, in 1e9 bytes/s
    assert s[schema.MEASURED_BUS_GBPS] == pytest.approx(7168 / 2e-5 / 1e9)
    assert s[schema.PREDICTED_BUS_GBPS] == pytest.approx(7168 / 1e-5 / 1e9)


def test_a_collectives_book_carries_its_bus_bytes():
    # an all-gather of 4096 bytes per device over 8 devices brings in the 7 other shards
    cfg = workloads.make_config("collective", "tiny", {"kind": "all_gather", "nbytes": 4096})
    mesh = SimpleNamespace(shape={"X": 8, "Y": 1})
    est = workloads.get("collective").book(cfg, mesh, hardware.chip("tpu-v5e"))
    assert est.bus_bytes == 7 * 4096 and est.model_flops == 0


def test_a_workload_run_is_titled_by_what_ran():
    r = SimpleNamespace(title="collective (tiny) on mesh {'X': 4, 'Y': 2}", path="stored",
                        meta={schema.WORKLOAD: "collective", schema.PRESET: "tiny",
                              schema.OVERRIDES: {"kind": "all_gather", "nbytes": 65536},
                              schema.MESH: {"X": 4, "Y": 2}, schema.DEVICE_COUNT: 8,
                              schema.DEVICE_KIND: "cpu", schema.CHIP: "cpu",
                              schema.TIME: "2026-11-25T08:37:07+00:00",
                              schema.GIT_SHA: "0e39f3f48d92", "jax_version": "0.10.2",
                              "backend": "cpu", schema.CONFIG: {"kind": "all_gather"}},
                        name="20261125-083707-collective-ab12")
    assert heading.title(r) == ("collective (tiny) kind=all_gather nbytes=65536 on mesh 4x2, "
                                "8x cpu (predicted for cpu)")
    assert heading.meta_lines(r) == [
        "ran 2026-11-25 08:37 +00:00 · jax 0.10.2 on cpu · commit 0e39f3f48d · run "
        "20261125-083707-collective-ab12", "config: kind=all_gather"]
    trace = SimpleNamespace(title="jit_train_step on 1x NVIDIA H100", meta={}, path="stored")
    assert heading.title(trace) == "jit_train_step on 1x NVIDIA H100"


WIDE = pd.DataFrame({f"column_{i}_s": [1e-3 * (i + 1), 2e-3] for i in range(14)}
                    | {schema.OVERRIDES: ["kind=all_gather nbytes=4194304 axes=X dtype=float32",
                                          "kind=all_reduce nbytes=4096"]})


def test_a_log_gets_one_line_per_row_and_a_terminal_its_width():
    lines = tables.to_text(WIDE).splitlines()
    assert len(lines) == 2 + 3 + 1  # rows, header (top border, names, rule), bottom border
    assert sum("kind=all_gather nbytes=4194304 axes=X dtype=float32" in line
               for line in lines) == 1
    assert max(len(line) for line in tables.to_text(WIDE, width=80).splitlines()) <= 80


def test_label_positions_keep_apart_within_the_axes():
    rng = random.Random(0)
    for n in (1, 2, 5, 12):
        ys = [rng.choice([0.5, 0.51, rng.random(), 1.2, -0.1]) for _ in range(n)]
        out = plots.spread(ys, gap=0.07)
        assert all(0.0 <= y <= 0.98 + 1e-12 for y in out)
        ordered = sorted(out)
        assert all(b - a >= 0.07 - 1e-12 for a, b in zip(ordered, ordered[1:]))
        # the order of the wanted heights is kept
        assert sorted(range(n), key=lambda i: (ys[i], i)) == sorted(range(n),
                                                                   key=lambda i: (out[i], i))


def test_the_roofline_names_its_top_ops_without_overlap():
    # five ops on one spot: their names, drawn, share no pixel
    ops = pd.DataFrame({schema.OP: [f"fusion.{i}" for i in range(7)],
                        schema.CATEGORY: ["matmul"] * 7, schema.COUNT: [1] * 7,
                        schema.FLOPS: [1e9] * 7, schema.HBM_BYTES: [1e7] * 7,
                        schema.MEASURED_S: [1e-3 * (1 + i / 100) for i in range(7)],
                        schema.SHARE: [0.1] * 7, schema.EFFICIENCY: [0.5] * 7})
    fig, ax = plots._figure((9.5, 5.2), margins=(0.9, 2.7, 1.15, 0.4))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1, 1e4)
    ax.set_ylim(1e9, 1e15)
    intensity = ops[schema.FLOPS] / ops[schema.HBM_BYTES]
    achieved = ops[schema.FLOPS] / ops[schema.MEASURED_S]
    plots._name_top_ops(ax, ops, intensity, achieved)
    fig.canvas.draw()
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t) for t in ax.texts]  # the names, not their lines
    assert len(boxes) == plots.TOP_OPS
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert plots._png(fig).startswith(b"\x89PNG")


def test_a_figure_that_is_text_wraps_in_the_html_summary():
    """A formula (a LLaMA run's model_flops_formula runs to 110 characters) sits in a cell that
    wraps, as the other text cells do; a number keeps its line."""
    formula = "V*(N-1)/(N*W) (sharding.md), the book's all-gather over N devices at W bytes/s"
    run = SimpleNamespace(summary={schema.ANALYTIC_FORMULA: formula, schema.COVERAGE: 1.0},
                          meta={}, chip=None)
    html = document._html_figures(run)
    assert "<td class=text>V*(N-1)/(N*W) (sharding.md)" in html
    assert "<td>100.0%</td>" in html


def test_a_column_too_wide_for_one_unit_keeps_one_unit_in_its_header():
    # 194.4 ms beside 6 ns: one unit per column (README), chosen so the largest cell stays under
    # 1e6 of it: 194434268 ns is too wide, 194434.268 us is not; 6 ns = 0.006 us
    labels, rows = _cells(pd.DataFrame({schema.MEASURED_S: [0.194434268, 8.153799e-3, 6e-9,
                                                            5e-9, 1e-9, 3e-9, 3e-9]}))
    assert labels == ["measured (us)"]
    assert [r[0] for r in rows] == ["194434", "8154", "0.0060", "0.0050", "0.0010", "0.0030",
                                    "0.0030"]
    # a gap of 1088127 ns beside 10 ns ones: 1088.127 us and 0.01 us
    labels, rows = _cells(pd.DataFrame({schema.GAP_S: [1.088127e-3, 1e-8, -2e-8, 1.5e-8]}))
    assert labels == ["gap (us)"]
    assert [r[0] for r in rows] == ["1088", "0.0100", "-0.0200", "0.0150"]
    # bytes likewise: 3 GiB = 3072 MiB beside 512 B = 512 / 2**20 = 0.00049 MiB
    labels, rows = _cells(pd.DataFrame({schema.DEVICE_BYTES: [3 * 2**30, 512, 512]}))
    assert labels == ["device (MiB)"] and [r[0] for r in rows] == ["3072", "0.0005", "0.0005"]
    # a column within 1e4 of its unit keeps its own unit (1080 ms < 1e4 ms)
    labels, _ = _cells(pd.DataFrame({schema.STEP_S: [2.48e-4, 5e-3, 1.08]}))
    assert labels == ["step (ms)"]


def test_a_time_of_float_error_reads_0_not_a_negative():
    # 1.5 ms - 1.5 ms leaves -2.2e-19 s in float: "0", where a real -2 us gap keeps its sign
    # (-0.002 ms, to the four decimals a cell shows at most)
    gap = 1.5e-3 - (1.5e-3 + 2.2e-19)
    labels, rows = _cells(pd.DataFrame({schema.GAP_S: [1.5e-3, gap, -2e-6, 1e-3]}))
    assert labels == ["gap (ms)"] and [r[0] for r in rows] == ["1.50", "0", "-0.0020", "1.00"]


def test_a_column_whose_unit_no_cell_shows_is_left_out():
    df = pd.DataFrame({schema.OP: ["dot.1", "add.2"], schema.MEASURED_S: [2e-3, 1e-3],
                       schema.PREDICTED_S: [math.nan, math.nan], schema.EFFICIENCY: [None, None]})
    assert list(tables.shown(df).columns) == [schema.OP, schema.MEASURED_S]
    text = tables.to_text(df)
    assert "measured (ms)" in text and "predicted" not in text and "efficiency" not in text
    md = tables.to_markdown(df)
    assert md.splitlines()[0] == "| op | measured (ms) |"
    # a column with one value stays, its blanks "-"; the CSV keeps every column
    df.loc[0, schema.PREDICTED_S] = 1e-3
    assert [r[2] for r in _cells(tables.shown(df))[1]] == ["1.00", "-"]
    assert tables.to_csv(df).splitlines()[0] == "op,measured_s,predicted_s,efficiency"


def test_the_overlap_line_prints_no_negative_zero():
    from harness.plan.render import step_lines

    # exposed = comm - overlapped; a core that waits on all of 3.14 s of communication leaves
    # overlapped = 3.14 - 3.14, which float subtraction can make -2.84e-14 s
    sim = SimpleNamespace(scheduled=True, step_s=4.0, compute_s=0.86, comm_s=3.14,
                          overlapped_comm_s=-2.84e-14, exposed_comm_s=3.14 + 2.84e-14,
                          critical_compute_s=0.86, critical_comm_s=3.14, sync_comm_s=3.14,
                          missing=())
    lines = step_lines(sim, {schema.PREDICTED_OPS_S: 4.0})
    assert lines[1].startswith("overlap hides 0 ns of the 3.14 s of communication")
    assert "-" not in lines[1].split("hides ")[1].split(" of")[0]


def test_a_traced_report_reads_in_units_and_leaves_out_blank_columns(capsys):
    from harness.cli import main

    trace = "tests/fixtures/external/tpu-v6e-inference"
    # the step program's op times span 194 ms (copy-done.4: 194434268 ns in the trace) to 1 ns:
    # one unit for the column, us (194434268 ns / 1e3 = 194434 us, under 1e6)
    assert main(["trace", trace, "--top", "0"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "│ copy-done.4 " in line)
    assert re.search(r"│ +194434 │", row) and "194434268" not in out and " ms │" not in row
    # every program: its one collective (a one-device all-reduce) has no exposed time to show,
    # so no "exposed_comm (s)" column of "-" only, and no legend entry for it
    assert main(["trace", trace, "--program", "all", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "Collectives explained" in out and "exposed_comm" not in out
