"""Bad input ends in one line and exit 2, never a traceback: damaged copies of real traces
(made here from the fixtures: truncated, bytes flipped, a chunk repeated, a block zeroed), a
Chrome JSON trace, and output paths that cannot be written."""
from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest

from harness import cli
from harness.trace.load import find_trace_file

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = {"tpu": FIXTURES / "external" / "tpu-v6e-inference",
           "amd": FIXTURES / "external" / "mi300x-conv",
           "h100": FIXTURES / "h100" / "matmul-B1024-8192x8192-bf16"}


def _damaged(data: bytes, how: str, rng: random.Random) -> bytes:
    n = len(data)
    at = rng.randrange(n)
    damage = {
        "truncated": lambda: data[:at],
        "flipped": lambda: data[:at] + bytes(rng.randrange(256) for _ in range(8))
        + data[at + 8:],
        "repeated": lambda: data[:at] + data[at:at + 4096] + data[at:],
        "zeroed": lambda: data[:at] + bytes(min(4096, n - at)) + data[at + 4096:],
    }
    return damage[how]()


CASES = [(src, how, seed) for src in SOURCES for how in ("truncated", "flipped", "repeated",
                                                           "zeroed") for seed in range(4)]


@pytest.mark.parametrize("src,how,seed", CASES)
def test_a_damaged_trace_gets_a_report_or_one_line(src, how, seed, tmp_path, capsys):
    data = find_trace_file(SOURCES[src]).read_bytes()
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(_damaged(data, how, random.Random(hash((src, how, seed)) % 2**32)))
    rc = cli.main(["trace", str(path), "--format", "csv"])  # any exception fails the test
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("harness")]
    assert rc == 0 or (rc == 2 and len(err) == 1 and str(path) in err[0]), err


@pytest.mark.filterwarnings("ignore:os.fork")
@pytest.mark.parametrize("src,how,seed", [c for c in CASES if c[0] != "amd" and c[2] < 2])
def test_damage_found_by_decode_workers_started_early_is_one_line(src, how, seed, tmp_path,
                                                                  capsys, monkeypatch):
    """As above with the decode in worker processes, started before the analysis is imported
    (``harness.trace.opener.start_decode``): a worker's error comes back as the same one line,
    and the workers' folder in /dev/shm goes with it."""
    from harness.trace import parallel

    if not parallel._can_fork():
        pytest.skip("no fork here: the decode runs in this process")
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    test_a_damaged_trace_gets_a_report_or_one_line(src, how, seed, tmp_path, capsys)
    assert not list(Path(parallel.SHM).glob(f"{parallel.FOLDER_PREFIX}{os.getpid()}-*"))


def test_a_chrome_json_trace_says_what_it_is(tmp_path, capsys):
    path = tmp_path / "vm.trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert cli.main(["trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Chrome/Perfetto JSON trace" in err and "*.xplane.pb" in err


def test_an_output_that_cannot_be_written_is_named_before_the_trace_is_read(tmp_path,
                                                                             capsys):
    # the path is checked first: no report printed, no other output written, one line
    html = tmp_path / "report.html"
    rc = cli.main(["trace", str(SOURCES["amd"]), "--csv", str(tmp_path / "no" / "ops.csv"),
                   "--html", str(html)])
    out, err = capsys.readouterr()
    assert rc == 2 and not html.exists() and out == ""
    line, = err.strip().splitlines()
    assert line.startswith(f"harness trace: error: --csv {tmp_path / 'no' / 'ops.csv'}: ")


def test_a_damaged_embedded_hlo_leaves_that_program_measured_only(tmp_path):
    """Cut the one embedded module's HloProto short: the trace still reads, its program is
    reported measured only, and a note says why."""
    from harness import schema
    from harness.runs.pipeline import analyze_trace
    from harness.trace.hlo_proto import HLO_PROTO_STAT, METADATA_PLANE
    from harness.trace.xplane import XSpace

    space = XSpace.FromString(find_trace_file(SOURCES["h100"]).read_bytes())
    meta = next(p for p in space.planes if p.name == METADATA_PLANE)
    stat_id = next(k for k, m in meta.stat_metadata.items() if m.name == HLO_PROTO_STAT)
    cut = 0
    for m in meta.event_metadata.values():
        for st in m.stats:
            if st.metadata_id == stat_id:
                st.bytes_value = st.bytes_value[:len(st.bytes_value) // 2]
                cut += 1
    assert cut == 1
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(space.SerializeToString())
    run = analyze_trace(path, chip="h100")
    assert (run.ops[schema.BOUND] == schema.UNMODELED).all() and len(run.ops)
    assert any("damaged" in n and "measured only" in n for n in run.notes), run.notes
