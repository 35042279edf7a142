"""Bad traces give one clear error naming the file; the CLI exits 2 with one line."""
import pytest
from xspace_text import plane, serialize

from harness.cli import main
from harness.errors import TraceError
from harness.trace.load import load_events


@pytest.fixture
def good_trace(tmp_path):
    ops = [("fusion.1", 10, 5, {"hlo_module": "m"})]
    data = serialize(plane("/device:TPU:0", {"XLA Ops": ops}))
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(data)
    return path


def test_missing_path(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        load_events(tmp_path / "nope")


def test_directory_without_trace(tmp_path):
    with pytest.raises(TraceError, match=r"no \*\.xplane\.pb"):
        load_events(tmp_path)


def test_truncated_trace(good_trace):
    data = good_trace.read_bytes()
    good_trace.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated or corrupt") as e:
        load_events(good_trace)
    assert str(good_trace) in str(e.value)


def test_corrupt_and_empty_trace(tmp_path):
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    with pytest.raises(TraceError, match="truncated or corrupt"):
        load_events(bad)
    bad.write_bytes(b"")
    with pytest.raises(TraceError, match="empty"):
        load_events(bad)


def test_trace_without_xla_ops():
    data = serialize(plane("/host:CPU", {"python": [("step", 0, 10, {"step_num": 0})]}))
    with pytest.raises(TraceError, match="no XLA op timeline"):
        load_events(data)


def test_directory_is_searched(good_trace):
    assert len(load_events(good_trace.parent)) == 1


@pytest.mark.parametrize("corrupt", ["missing", "truncated"])
def test_cli_one_line_error_exit_2(tmp_path, good_trace, capsys, corrupt):
    target = tmp_path / "nope" if corrupt == "missing" else good_trace
    if corrupt == "truncated":
        good_trace.write_bytes(good_trace.read_bytes()[:7])
    assert main(["trace", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(target) in err


def test_cli_trace_table_and_csv(good_trace, tmp_path, capsys):
    out_csv = tmp_path / "ops.csv"
    assert main(["trace", str(good_trace), "--csv", str(out_csv)]) == 0
    assert "fusion.1" in capsys.readouterr().out
    assert out_csv.read_text().splitlines()[0].startswith("program,op,count,measured_s")
