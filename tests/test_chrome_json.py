"""jax.profiler's Chrome JSON trace of a 2-device TPU vLLM step (``harness.trace.chrome``): its ops,
programs and steps as EVENTS, each program's HLO rebuilt from its ops' texts and priced, and
``harness explain`` on it. Expected figures are counted here from the file with json + gzip,
independently of the reader, or written as arithmetic."""
from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from harness import cli, schema
from harness.trace import chrome
from harness.trace.load import find_trace_file, read_events

FIXTURES = Path(__file__).parent / "fixtures"
# beside external/, not in it: the tests that read every external/ profile with the trace's
# own chip (this file names none) read XSpace profiles
TRACE = FIXTURES / "external-json" / "tpu-2dev-vllm-json" / "2026_01_11_21_26_41.trace.json.gz"
XSPACE = FIXTURES / "external" / "tpu-v6e-inference"
CHIP = "tpu-7x"  # the file names no chip (its README: most likely TPU7x)


def _threads() -> dict:
    """(device, thread name) -> its X events, read here with json + gzip alone."""
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    device = {e["pid"]: int(e["args"]["name"].rsplit(":", 1)[1]) for e in meta
              if e["name"] == "process_name" and e["args"]["name"].startswith("/device:TPU:")}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    out: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in device:
            out.setdefault((device[e["pid"]], thread[(e["pid"], e["tid"])]), []).append(e)
    return out


@pytest.fixture(scope="module")
def threads():
    return _threads()


@pytest.fixture(scope="module")
def events():
    return read_events(TRACE)


@pytest.fixture(scope="module")
def run():
    from harness.runs.pipeline import analyze_trace

    return analyze_trace(TRACE, chip=CHIP)


def test_every_op_of_every_device_is_a_row_of_its_program(threads, events):
    assert events.format == "tpu-json" and not events.stepped  # no step markers in the file
    ev = events.events
    ops = {d: e for (d, name), e in threads.items() if name == "XLA Ops"}
    assert sorted(ops) == sorted(ev[schema.DEVICE].unique()) == [0, 1]
    for d, found in ops.items():
        assert (ev[schema.DEVICE] == d).sum() == len(found) == 3454
    modules = {e["name"] for (_, name), es in threads.items() if name == "XLA Modules"
               for e in es}
    assert {f"{p}({i})" for p, i in ev[[schema.PROGRAM, schema.PROGRAM_ID]]
            .drop_duplicates().astype(str).itertuples(index=False)} == modules
    step = ev[ev[schema.PROGRAM] == "jit_step_fun"]
    assert step[schema.PROGRAM_ID].astype(str).unique().tolist() == ["5120112285394406626"]


def test_129_all_reduces_a_step_on_each_device(threads, events):
    ev = events.events
    for d in (0, 1):
        counted = Counter(e["args"]["hlo_category"] for e in threads[(d, "XLA Ops")])
        assert counted["all-reduce"] == 129
        mine = ev[(ev[schema.DEVICE] == d) & ev[schema.OP].astype(str).str.startswith(
            "all-reduce")]
        assert len(mine) == 129 and set(mine[schema.PROGRAM]) == {"jit_step_fun"}


def test_durations_are_the_devices_own_in_whole_ns(threads, events):
    ev = events.events
    rows = ev[ev[schema.DEVICE] == 0]  # in the file's order
    found = threads[(0, "XLA Ops")]
    assert rows[schema.OP].astype(str).tolist() == [e["name"] for e in found]
    # no op nests in another here: an op's self time is its device_duration_ps, to the ns
    assert rows[schema.DURATION_NS].tolist() == [
        (int(e["args"]["device_duration_ps"]) + 500) // 1000 for e in found]
    assert rows[schema.START_NS].tolist() == [round(e["ts"] * 1000) for e in found]


def test_each_program_is_rebuilt_as_hlo_the_parser_reads():
    from harness.hlo import parse_module

    trace = chrome.read(TRACE.read_bytes(), str(TRACE))
    assert {name for name, _ in trace.hlo_texts} == {
        "jit_step_fun", "jit_compute_logits_func", "jit_sample", "jit__select_from_array_fn"}
    text = trace.hlo_texts[("jit_step_fun", "5120112285394406626")]
    module = parse_module(text)
    assert module.num_devices == 2
    ar = module.instruction("all-reduce.1")
    assert ar.attrs["replica_groups"].group_size == 2
    assert ar.op_name.startswith("jit(step_fun)/aten::embedding")
    assert trace.device.platform == "tpu" and trace.device.count == 2


def test_the_rebuilt_hlo_against_the_traces_own_figures(threads):
    """Our per-op FLOPs and HBM bytes against xprof's ``model_flops`` / ``bytes_accessed`` (the
    peer figure), every op of the step program; each difference is deliberate."""
    from harness.hlo import hlo_costs, parse_module

    trace = chrome.read(TRACE.read_bytes(), str(TRACE))
    module = parse_module(trace.hlo_texts[("jit_step_fun", "5120112285394406626")])
    ours = hlo_costs(module, CHIP, async_on="done").set_index(schema.OP)
    theirs = {e["name"]: e["args"] for e in threads[(0, "XLA Ops")]}
    same = Counter()
    for op, row in ours.iterrows():
        a = theirs[op]
        f, b = int(a["model_flops"]), int(a["bytes_accessed"])
        same[a["hlo_category"], row[schema.FLOPS] == f, row[schema.HBM_BYTES] == b] += 1
    # matmul and loop fusions: FLOPs the trace's (the stand-in body carries them); bytes their
    # operands' and results' as printed, equal where the fusion reads each operand whole
    assert same["convolution fusion", True, True] == 256
    assert same["loop fusion", True, True] == 586
    # 64 loop fusions (fusion.1538: bf16[1024,1,3584] -> two bf16[1024,1,512] slices) read
    # only the slices; the body is unknown, so ours reads the operand whole:
    # 2*1024*3584 + 2*(2*1024*512) = 9,437,184 against 2*(2*1024*512) * 2 = 4,194,304
    assert same["loop fusion", True, False] == 64
    f1538 = ours.loc["fusion.1538"]
    assert f1538[schema.HBM_BYTES] == 2 * 1024 * 3584 + 2 * (2 * 1024 * 512)
    assert int(theirs["fusion.1538"]["bytes_accessed"]) == 2 * (2 * 1024 * 512) * 2
    # an all-reduce moves its 10 MiB in and out of HBM as the trace says; its FLOPs are each
    # device's share of the sum, (n-1)/n of the 1024*5120 adds xprof counts once
    assert same["all-reduce", False, True] == 129
    assert ours.loc["all-reduce.1", schema.FLOPS] == 1024 * 5120 * (2 - 1) / 2
    assert int(theirs["all-reduce.1"]["model_flops"]) == 1024 * 5120
    # data formatting: a copy as the trace; a reshape a view in the rules (0 bytes), a relayout
    # on TPU's tiled layouts (the trace: read + write)
    assert same["data formatting", True, True] == 258
    assert same["data formatting", True, False] == 192
    # async pairs: the work on the -done (TPU), read + write of the buffer; xprof counts the
    # -start's whole result tuple (both buffers and its context) on the start
    assert ours.loc["copy-start.209", schema.HBM_BYTES] == 0
    assert ours.loc["copy-done.209", schema.HBM_BYTES] == 1024 + 1024  # pred[1024] in, out
    assert int(theirs["copy-start.209"]["bytes_accessed"]) == 3 * 1024 + 4


def test_the_all_reduces_are_priced(run):
    ops = run.ops[run.ops[schema.OPCODE] == "all-reduce"]
    assert len(ops) == 129
    assert (ops[schema.COMM_BYTES] == 2 * 1024 * 5120).all()  # bf16[1024,5120], per device
    assert (ops[schema.BOUND] == "comm").all() and (ops[schema.PREDICTED_S] > 0).all()
    assert run.collectives is not None and len(run.collectives) == 129
    assert any("rebuilt from the Chrome JSON" in n for n in run.notes)


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_explain_names_the_all_reduces(capsys):
    assert cli.main(["explain", str(TRACE), "--chip", CHIP, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "129 collectives" in out and "all-reduce" in out


def test_without_a_chip_explain_asks_for_one(capsys):
    assert cli.main(["explain", str(TRACE)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--chip" in err[0] and CHIP in err[0]


def test_a_directory_holding_the_json_is_read_and_an_xspace_beside_it_wins(tmp_path):
    run_dir = tmp_path / "plugins" / "profile" / "run"
    run_dir.mkdir(parents=True)
    shutil.copy(TRACE, run_dir / "host.trace.json.gz")
    assert find_trace_file(tmp_path) == run_dir / "host.trace.json.gz"
    xspace = find_trace_file(XSPACE)
    shutil.copy(xspace, run_dir / "host.xplane.pb")
    assert find_trace_file(tmp_path) == run_dir / "host.xplane.pb"


BAD = {
    "truncated": lambda: TRACE.read_bytes()[: TRACE.stat().st_size // 2],
    "pytorch": lambda: gzip.compress(json.dumps(
        {"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}).encode()),
    "gpu": lambda: gzip.compress(json.dumps({"traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}}]})
        .encode()),
}
SAID = {"truncated": "truncated or corrupt Chrome JSON", "pytorch": "PyTorch profiler trace",
        "gpu": "GPU devices"}


@pytest.mark.parametrize("what", BAD)
def test_a_bad_json_trace_is_one_line(what, tmp_path, capsys):
    path = tmp_path / "vm.trace.json.gz"
    path.write_bytes(BAD[what]())
    assert cli.main(["trace", str(path), "--chip", CHIP]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and SAID[what] in err[0] and str(path) in err[0], err
    assert re.search(r"\(|xplane|lacks|not", err[0])


def _made_up(steps: bool) -> bytes:
    """A two-step TPU Chrome JSON made here: one program run twice, two ops a run (a fusion
    and an all-reduce over 4 devices), with a ``Steps`` thread or none."""
    meta = [{"ph": "M", "pid": 7, "name": "process_name", "args": {"name": "/device:TPU:0"}}]
    meta += [{"ph": "M", "pid": 7, "tid": t, "name": "thread_name", "args": {"name": n}}
             for t, n in ((1, "Steps"), (2, "XLA Modules"), (3, "XLA Ops"))]
    fusion = ("%add_fusion = f32[256]{0} fusion(f32[256]{0} %param.0), kind=kLoop, "
              "calls=%fused_computation")
    ar = ("%all-reduce.3 = f32[256]{0} all-reduce(f32[256]{0} %add_fusion), "
          "replica_groups=[1,4]<=[4], to_apply=%add")
    events = []
    for k, t0 in enumerate((100.0, 200.0)):
        if steps:
            events.append({"ph": "X", "pid": 7, "tid": 1, "ts": t0, "dur": 50.0,
                           "name": str(10 + k), "args": {"step_num": str(10 + k)}})
        events.append({"ph": "X", "pid": 7, "tid": 2, "ts": t0, "dur": 50.0, "name": "jit_f(42)"})
        for j, (name, text) in enumerate((("add_fusion", fusion), ("all-reduce.3", ar))):
            events.append({"ph": "X", "pid": 7, "tid": 3, "ts": t0 + 10 * j + 1, "dur": 5.0,
                           "name": name, "args": {
                               "device_duration_ps": str(4_000_000 + j), "long_name": text,
                               "model_flops": "256", "bytes_accessed": "2048"}})
    return gzip.compress(json.dumps({"traceEvents": meta + events}).encode())


@pytest.mark.parametrize("steps", [True, False])
def test_steps_from_a_steps_thread_else_each_execution(steps):
    read = read_events(_made_up(steps))
    ev = read.events
    assert read.stepped is steps and len(ev) == 4
    assert ev[schema.DURATION_NS].tolist() == [4000, 4000, 4000, 4000]  # 4,000,000(+1) ps
    assert sorted(ev[schema.STEP].unique()) == ([0, 1] if steps else [0])
    assert set(ev[schema.PROGRAM_ID].astype(str)) == {"42"}


def test_a_made_up_module_prices_its_fusion_by_the_traces_flops():
    from harness.hlo import hlo_costs, parse_module

    trace = chrome.read(_made_up(True), "<made-up>")
    module = parse_module(trace.hlo_texts[("jit_f", "42")])
    costs = hlo_costs(module, CHIP).set_index(schema.OP)
    assert costs.loc["add_fusion", schema.FLOPS] == 256  # the trace's model_flops
    assert costs.loc["add_fusion", schema.HBM_BYTES] == 2 * 256 * 4  # f32[256] in and out
    assert costs.loc["all-reduce.3", schema.GROUP_SIZE] == 4
    assert costs.loc["all-reduce.3", schema.COMM_BYTES] == 256 * 4


def test_harness_trace_asks_for_the_chip_a_chrome_json_does_not_name():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "harness", "trace", str(TRACE.parent)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "names no chip" in line and "--chip" in line and "tpu-v5e" in line
