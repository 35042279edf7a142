"""One figure per idea in a run's report tables (issue 58 part 4): one unit per column, chosen
from the column's values, never a unit per cell; and one measured time per op across the op
table and the collectives table, or two figures each named for what it is."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from harness import schema
from harness.report import document, render, tables

# a cell that names a unit of its own ("194 ms", "3.00 GiB")
_UNIT_CELL = re.compile(r"^-?[\d.]+\s*(days|s|ms|us|ns|B|KiB|MiB|GiB|TiB)$")
TPU_TRACE = "tests/fixtures/external/tpu-v6e-inference"


def _cells(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols, rows = tables.cells(df)
    return [c.label for c in cols], rows


def test_a_column_spanning_ms_to_ns_reads_in_one_unit():
    # 194.4 ms beside 6 ns: the typical value (6 ns) chooses ns, where 194.4 ms would read
    # 194434268; the next unit up, us, reads it under 1e6: 194434.268 us and 6e-9 s = 0.006 us
    labels, rows = _cells(pd.DataFrame({schema.MEASURED_S: [0.194434268, 8.153799e-3, 6e-9,
                                                            5e-9, 1e-9]}))
    assert labels == ["measured (us)"]
    assert [r[0] for r in rows] == ["194434", "8154", "0.0060", "0.0050", "0.0010"]
    # bytes likewise: 3 GiB beside 512 B: 3 * 2**30 B is 3072 MiB, 512 B is 512 / 2**20 MiB
    labels, rows = _cells(pd.DataFrame({schema.DEVICE_BYTES: [3 * 2**30, 512, 512]}))
    assert labels == ["device (MiB)"] and [r[0] for r in rows] == ["3072", "0.0005", "0.0005"]
    # 1.088 ms beside 10 ns gaps: ns would read 1088127; in us 1088.127 and 1e-8 s = 0.01 us
    labels, rows = _cells(pd.DataFrame({schema.GAP_S: [1.088127e-3, 1e-8, -2e-8, 1.5e-8]}))
    assert labels == ["gap (us)"] and [r[0] for r in rows] == ["1088", "0.0100", "-0.0200",
                                                               "0.0150"]
    # a column within WIDE of the unit its values choose keeps it (1080 ms < 1e6 ms)
    labels, rows = _cells(pd.DataFrame({schema.STEP_S: [2.48e-4, 5e-3, 1.08]}))
    assert labels == ["step (ms)"] and [r[0] for r in rows] == ["0.248", "5.00", "1080"]


def _numeric_cells(r) -> list[tuple[str, str, str]]:
    """(table, column label, cell) of every numeric cell of every table a report shows."""
    out = []
    for name, df, columns in document._tables(r, None):
        shown = document._shown(df, columns)
        cols, rows = tables.cells(shown)
        for j, c in enumerate(cols):
            if pd.api.types.is_numeric_dtype(shown[c.name]):
                out += [(name, c.label, row[j]) for row in rows]
    return out


def test_every_table_of_a_traced_report_has_one_unit_per_column(capsys):
    import harness

    # the step program's ops take 194 ms (copy-done.4) down to 1 ns
    r = harness.analyze_trace(TPU_TRACE, program="all")
    cells = _numeric_cells(r)
    assert cells and not [c for c in cells if _UNIT_CELL.match(c[2])]
    # the op table's measured column names its unit in its header, every cell a number
    measured = [label for table, label, _ in cells if table.startswith("Ops")
                and label.startswith("measured (")]
    assert measured and len(set(measured)) == 1
    # so does the text a user reads
    text = render(r, "text", top=0)
    row = next(line for line in text.splitlines() if "│ copy-done.4 " in line)
    assert " ms │" not in row and "194434268" not in text


@pytest.fixture(scope="module")
def cpu_run(cpu_traces):
    import harness

    return harness.analyze_trace(cpu_traces[0], chip="h100")  # a data sheet: no calibration


def test_op_and_collectives_tables_agree_for_each_collective(cpu_run):
    r = cpu_run
    shown = document._collectives(r)
    assert shown is not None and len(shown)
    ops = r.ops.set_index(schema.OP)[schema.MEASURED_S]
    comm = {c[schema.OP]: c[schema.COMM_S] for c in r.step[schema.STEP_COLLECTIVES]}
    for _, row in shown.iterrows():
        # measured: the op table's own figure for the op, the same number
        assert row[schema.MEASURED_S] == pytest.approx(ops[row[schema.OP]], rel=1e-9)
        # span: the step timeline's, under its own name, never captioned "measured"
        assert row[schema.SPAN_S] == pytest.approx(comm[row[schema.OP]], rel=1e-9)
        assert row[schema.EXPOSED_COMM_S] <= row[schema.SPAN_S] * (1 + 1e-9)
    # the text's headers name the two: "measured (unit)" and "span (unit)"
    text = render(r, "text", top=0)
    section = text.split("Collectives explained", 1)[1]
    header = next(line for line in section.splitlines() if "┃ op " in line)
    assert re.search(r"measured \((s|ms|us|ns)\)", header)
    assert re.search(r"span \((s|ms|us|ns)\)", header)
    assert schema.SPAN_S in schema.GLOSSARY and "timeline" in schema.GLOSSARY[schema.SPAN_S]
    # the JSON's collectives carry the same two figures (pandas writes 10 decimals)
    records = json.loads(render(r, "json"))["collectives"]
    for rec in records:
        assert rec[schema.MEASURED_S] == pytest.approx(ops[rec[schema.OP]], abs=1e-10)
        assert rec[schema.SPAN_S] == pytest.approx(comm[rec[schema.OP]], abs=1e-10)


def test_a_cpu_run_has_one_unit_per_column_in_every_table(cpu_run):
    cells = _numeric_cells(cpu_run)
    assert cells and not [c for c in cells if _UNIT_CELL.match(c[2])]


def test_the_memory_modules_import_in_either_order():
    # harness.memory.render uses the report's tables; the report's memory section, memory's
    # render: neither may need the other loaded first
    for first in ("harness.memory.render", "harness.report.memory"):
        done = subprocess.run([sys.executable, "-c", f"import {first}"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-400:]
