"""The HLO parser and cost rules on HLO compiled by libtpu (tests/fixtures/tpu/), the TPU
topology names, the fit line and the gap to the book. Fixture tests need no libtpu; the live
compiles are marked ``libtpu`` (skipped without it) and the real-size ones ``slow``."""
import gzip
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from harness import schema
from harness.capture.memory import memory_fit
from harness.cli import main
from harness.errors import HarnessError
from harness.hlo import category, cross_check, executed, parse_module
from harness.hlo.cost import instruction_cost
from harness.hlo.tpu import chain_role
from harness.plan.compiles import compile_keys
from harness.plan.predict import book_gap, predict_module
from predictions import step
from workloads import tpu
from workloads.base import WorkloadError

FIXTURES = Path(__file__).parent / "fixtures" / "tpu"
NAMES = sorted(p.name.split(".hlo")[0] for p in FIXTURES.glob("*.hlo.txt*"))
MiB = 1 << 20


def load(name: str):
    """(parsed module, the compile's metadata: chip, cost_analysis, memory, ...)."""
    path = next(FIXTURES.glob(f"{name}.hlo.txt*"))
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    return parse_module(text), json.loads((FIXTURES / f"{name}.json").read_text())


def test_every_case_of_the_generator_has_a_fixture():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert NAMES == sorted(generator.CASES)
    assert all((FIXTURES / f"{n}.json").exists() for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_unmodeled_share_is_at_most_two_percent(name):
    module, meta = load(name)
    ops = predict_module(module, meta["chip"]).ops
    unmodeled = ops.loc[ops[schema.BOUND] == schema.UNMODELED, schema.PREDICTED_S].sum()
    assert unmodeled <= 0.02 * ops[schema.PREDICTED_S].sum()
    assert meta["compiler"].startswith("XLA:TPU") and meta["topology"].startswith(("v5e", "v5p"))


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("matmul", "llama"))])
def test_flops_agree_with_xla_cost_analysis(name):
    # XLA's HloCostAnalysis counts while bodies once; so does flops_loops_once. Independent of us.
    module, meta = load(name)
    check = cross_check(module, meta["cost_analysis"])
    assert abs(check["flops_loops_once_rel_diff"]) < 0.01


@pytest.mark.parametrize("name", ["collective_all_reduce", "collective_all_reduce_2d"])
def test_all_reduce_flops_are_the_books_n_minus_one_over_n(name):
    # sharding.md: an AllReduce adds (n-1)/n of the elements per device; XLA counts all of them
    module, meta = load(name)
    check = cross_check(module, meta["cost_analysis"])
    assert check["flops"] == pytest.approx(meta["cost_analysis"]["flops"] * 7 / 8)


# matmul preset "small": X[256, 512] @ Y[512, 256] in bf16 on a 2x2 mesh (X = 2)
MATMUL_FLOPS = {
    "matmul_allgather": 2 * 256 * 512 * 256,          # X gathered: the whole product per device
    "matmul_allgather_v5p": 2 * 256 * 512 * 256,
    "matmul_no_comm": 2 * 256 * 512 * 256 // 4,       # B over X, F over Y: a quarter each
    "matmul_same_axis": 2 * 256 * 512 * 256 // 2,     # Y gathered, B stays split over X
}


@pytest.mark.parametrize("name", sorted(MATMUL_FLOPS))
def test_matmul_flops_per_device(name):
    module, meta = load(name)
    ops = predict_module(module, meta["chip"]).ops
    dots = ops[ops[schema.CATEGORY] == "matmul"]
    assert (dots[schema.FLOPS] * dots[schema.COUNT]).sum() == MATMUL_FLOPS[name]


# collective preset "1mb": 1 MiB per device on 8 devices; bytes in predictions.collectives'
# convention (V_OF_INPUT): V = gathered output, reduced array, whole exchange
COMM_BYTES = {
    "collective_all_gather": ("all-gather", 8 * MiB),
    "collective_all_reduce": ("all-reduce", MiB),
    "collective_all_reduce_2d": ("all-reduce", MiB),
    "collective_all_to_all": ("all-to-all", 8 * MiB),
    "collective_ppermute": ("collective-permute", MiB),
}


@pytest.mark.parametrize("name", sorted(COMM_BYTES))
def test_collective_bytes_and_group(name):
    module, meta = load(name)
    ops = predict_module(module, meta["chip"]).ops
    coll = ops[ops[schema.COLLECTIVE] != ""]
    kind, nbytes = COMM_BYTES[name]
    assert set(coll[schema.COLLECTIVE]) == {kind}
    assert (coll[schema.COMM_BYTES] * coll[schema.COUNT]).sum() == nbytes
    assert set(coll[schema.GROUP_SIZE]) == {8}


def test_tiled_layouts_keep_shapes_and_memory_space():
    module, _ = load("matmul_allgather")
    gather = module.instruction("all-gather.5")  # bf16[256,512]{1,0:T(8,128)(2,1)S(1)}
    assert gather.shapes[0].dims == (256, 512) and gather.shapes[0].dtype == "bf16"
    assert gather.memory_spaces == (1,)


def test_async_collective_chain_is_charged_once_at_its_start():
    module, _ = load("llama_train")
    roles: dict[str, list] = {}
    for instr, _ in executed(module):
        role = chain_role(module, instr)
        if role:
            roles.setdefault(role, []).append(instr)
    assert roles["start"] and roles["done"] and roles["continue"]
    assert len(roles["start"]) == len(roles["done"])
    for start in roles["start"]:  # its all-gather: bf16[1,64,64] out = 8192 bytes gathered
        assert instruction_cost(start, module).comm_bytes > 0
    for instr in roles["done"] + roles["continue"]:
        assert instruction_cost(instr, module).comm_bytes == 0
    # a continuation is the matmul the transfer runs under
    assert {category(module, i) for i in roles["continue"]} <= {"matmul", "attention"}


# --- topology names (tpus.md: v5e/v6e 2-D tori, v4/v5p 3-D) --------------------------------
@pytest.mark.parametrize("chips, ndim, dims", [
    (64, 3, (4, 4, 4)), (256, 3, (4, 8, 8)), (128, 3, (4, 4, 8)), (4, 3, (2, 2, 1)),
    (8, 3, (2, 2, 2)), (16, 2, (4, 4)), (8, 2, (2, 4)), (256, 2, (16, 16)), (1, 2, (1, 1)),
    (12, 3, (2, 2, 3)),
])
def test_topology_dims(chips, ndim, dims):
    assert tpu.topology_dims(chips, ndim) == dims and math.prod(dims) == chips


def test_topology_name_for_chip_and_mesh():
    assert tpu.topology_name("tpu-v5e", (4, 4)) == "v5e:4x4"
    assert tpu.topology_name("tpu-v5p", (8, 8)) == "v5p:4x4x4"
    assert tpu.topology_name("tpu-v5p", (16, 16)) == "v5p:4x8x8"
    assert tpu.topology_name("tpu-v6e", (2, 4, 2)) == "v6e:4x4"
    with pytest.raises(WorkloadError, match="chips with one: tpu-v4p"):
        tpu.topology_name("h100", (8,))


def test_compile_keys_fall_back_to_cpu_without_libtpu_in_one_line():
    keys, notes = compile_keys(["tpu-v5p", "h100"], "auto", have_libtpu=False)
    assert keys == {"tpu-v5p": "cpu", "h100": "cpu"}
    assert len(notes) == 1 and "pip install" in notes[0] and "\n" not in notes[0]
    assert compile_keys(["tpu-v5p", "h100"], "auto", have_libtpu=True)[0] == {
        "tpu-v5p": "tpu-v5p", "h100": "cpu"}
    assert compile_keys(["tpu-v5p"], "cpu", have_libtpu=True) == ({"tpu-v5p": "cpu"}, [])
    with pytest.raises(HarnessError, match="needs libtpu"):
        compile_keys(["tpu-v5p"], "tpu", have_libtpu=False)
    with pytest.raises(HarnessError, match="no libtpu topology"):
        compile_keys(["h100"], "tpu", have_libtpu=True)


def test_memory_fit_arithmetic():
    # v5p: 96e9 bytes of HBM (tpus.md); 11 + 11 + 79 GB = 101 GB does not fit, 5 GB over
    fit = memory_fit({"arguments": 11e9, "outputs": 11e9, "aliased": 0, "temporaries": 79e9,
                      "code": 0}, "tpu-v5p")
    assert fit["peak_bytes"] == 101e9 and not fit["fits"]
    assert fit["headroom_bytes"] == pytest.approx(-5e9)
    fit = memory_fit({"arguments": 4e9, "outputs": 4e9, "aliased": 4e9, "temporaries": 2e9},
                     "tpu-v5e")
    assert fit["peak_bytes"] == 6e9 and fit["fits"] and fit["headroom_bytes"] == 10e9
    # the compiler's own peak, where given, is what must fit (buffers share memory over time)
    fit = memory_fit({"arguments": 1.3e9, "outputs": 1.3e9, "temporaries": 29.3e9,
                      "peak": 25.2e9}, "tpu-v5e")
    assert fit["sum_bytes"] == pytest.approx(31.9e9) and fit["peak_bytes"] == 25.2e9
    assert not fit["fits"] and fit["headroom_bytes"] == pytest.approx(16e9 - 25.2e9)
    # with activations offloaded libtpu's peak may be the host memory's: LLaMA-3.1 70B on v6e-256
    # (libtpu 0.0.42.1) reported peak 126334798496 = 120795955200 host temporaries (80 layers
    # x 5 x 8192 tokens x (8192 + 8192 + 1024 + 1024) x 2 bytes) + arguments + outputs; the
    # HBM holds the sum, 2769666560 + 2769142944 + 26507333984 + 48322560 bytes
    assert 80 * 5 * 8192 * (8192 + 8192 + 1024 + 1024) * 2 == 120795955200
    assert 120795955200 + 2769666560 + 2769142944 == 126334764704   # the peak, to 34 kB
    fit = memory_fit({"arguments": 2769666560, "outputs": 2769142944, "temporaries": 26507333984,
                      "code": 48322560, "peak": 126334798496,
                      "host_temporaries": 120795955200}, "tpu-v6e")
    assert fit["peak_bytes"] == fit["sum_bytes"] == 2769666560 + 2769142944 + 26507333984 \
        + 48322560
    # a peak above the host's figure is the HBM's: 405B on v5p-1024, state donated (GB)
    fit = memory_fit({"arguments": 7.969e9, "outputs": 7.969e9, "aliased": 7.969e9,
                      "temporaries": 100.821e9, "code": 0.227e9, "peak": 93.815e9,
                      "host_temporaries": 68.703e9}, "tpu-v5p")
    assert fit["peak_bytes"] == 93.815e9 and fit["fits"]   # 68.703 + 7.969 = 76.7 GB is not it


def test_a_program_libtpu_placed_fits_past_the_books_hbm():
    from harness.plan.fit import fit_line

    # LLaMA-3.1 70B on v6e-256, loss in 16 chunks, state donated (libtpu 0.0.42.1 compiled it):
    # 32.62 GB past the book's 32 GB, within the 31.25 GiB libtpu counts usable (its refusals
    # say "available HBM (31.25G)", and its G is 2**30: v5e's 16 GiB shows as 15.75G)
    # (the state aliased onto itself; its peak the host memory's: host temporaries + the state)
    memory = {"arguments": 2769666560, "outputs": 2769142944, "aliased": 2769142944,
              "temporaries": 29802010880, "code": 48322560, "host_temporaries": 120795955200,
              "peak": 120795955200 + 2769666560}
    assert 31.25 * 2**30 == pytest.approx(33.55e9, rel=1e-3) and 32.62e9 < 31.25 * 2**30
    judged = memory_fit(memory, "tpu-v6e")
    placed = memory_fit(memory, "tpu-v6e", placed=True)
    assert placed["sum_bytes"] == pytest.approx(32.62e9)
    assert not judged["fits"] and placed["fits"] and placed["placed_past_book"]
    line = fit_line(placed, "tpu-v6e")
    assert "the TPU compiler placed every buffer" in line and "host memory's" in line
    # under the book's HBM, placed or not, the verdict is the same
    small = {"arguments": 1e9, "outputs": 1e9, "temporaries": 10e9}
    assert memory_fit(small, "tpu-v6e", placed=True)["fits"] and \
        not memory_fit(small, "tpu-v6e", placed=True)["placed_past_book"]


def _ops(rows):
    return pd.DataFrame([{schema.CATEGORY: c, schema.PREDICTED_S: s, schema.FLOPS: f,
                          schema.HBM_BYTES: b, schema.COMM_BYTES: m, schema.COUNT: n}
                         for c, s, f, b, m, n in rows])


def test_book_gap_parts_work_and_excess():
    parts = {step.MATMUL: step.BookPart(2.0, 100.0, ""),
             step.COLLECTIVE: step.BookPart(1.0, 50.0, ""),
             step.MEMORY: step.BookPart(0.0, 0.0, ""),
             step.OVERLAP: step.BookPart(-1.0, None, "")}
    ops = _ops([("matmul", 2.5, 30.0, 0, 0, 4),       # 120 FLOPs = 1.2x the book's
                ("attention", 0.5, 0.0, 0, 0, 1),
                ("collective", 3.0, 0.0, 0, 25.0, 4),  # 100 bytes = 2x the book's
                ("elementwise", 0.25, 1.0, 8.0, 0, 2)])
    gap = book_gap(parts, {"tpu": ops}).set_index(schema.PART)
    assert gap.loc["matmul", "tpu_s"] == 3.0 and gap.loc["matmul", "tpu_work_x"] == 1.2
    assert gap.loc["matmul", "tpu_excess_s"] == pytest.approx(3.0 - 1.2 * 2.0)
    assert gap.loc["collective", "tpu_work_x"] == 2.0
    assert gap.loc["collective", "tpu_excess_s"] == pytest.approx(3.0 - 2.0 * 1.0)
    assert gap.loc["memory", "tpu_s"] == 0.25 and gap.loc["memory", "tpu_excess_s"] == 0.25
    assert gap.loc["overlap", "tpu_s"] == 0 and gap.loc["overlap", "tpu_excess_s"] == 1.0
    assert gap.loc["step", schema.BOOK_S] == 2.0 and gap.loc["step", "tpu_s"] == 6.25
    assert gap.loc["step", "tpu_excess_s"] == 4.25
    # with the simulated step (5.0 s, say: 1.25 s of the 6.25 s hidden), the overlap row is
    # what the schedule hides and the parts add up to it, as the book's do
    gap = book_gap(parts, {"tpu": ops}, {"tpu": 5.0}).set_index(schema.PART)
    assert gap.loc["overlap", "tpu_s"] == -1.25 and gap.loc["step", "tpu_s"] == 5.0
    assert gap.loc["overlap", "tpu_excess_s"] == pytest.approx(-1.25 - -1.0)
    assert gap.loc[list(step.PARTS), "tpu_s"].sum() == gap.loc["step", "tpu_s"]
    assert gap.loc["step", "tpu_excess_s"] == 5.0 - 2.0


def test_book_parts_add_up_to_the_books_step():
    from types import SimpleNamespace

    import workloads

    for name in ("llama_train", "llama_prefill", "llama_decode"):
        cfg = workloads.make_config(name, "70b", {})
        mesh = SimpleNamespace(shape={"X": 8, "Y": 8})
        est = workloads.get(name).book(cfg, mesh, "tpu-v5p")
        assert sum(p.seconds for p in est.parts.values()) == pytest.approx(est.analytic_s)
        # matmul work: the book's FLOPs (6P or 2P over all parameters, not the MFU count)
        # spread over the 64 chips
        assert est.parts[step.MATMUL].work == pytest.approx(est.book_flops / 64)


# --- live compiles with libtpu -----------------------------------------------------------------
@pytest.mark.libtpu
def test_predict_hlo_compiles_for_the_tpu_slice(capsys):
    assert main(["predict-hlo", "matmul", "--mesh", "2x2", "--chip", "tpu-v5e",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    tpu_compile = out["compiles"]["tpu-v5e"]
    assert tpu_compile["compiler"].startswith("XLA:TPU") and tpu_compile["topology"] == "v5e:2x2"
    assert out["compiles"]["cpu"]["compiler"] == "XLA:CPU"
    chip = out["chips"][0]
    assert chip["compile"] == "tpu-v5e" and chip["memory_fit"]["fits"]
    assert chip["memory_fit"]["arguments"] > 0 and chip["totals"]["unmodeled_ops"] == 0


@pytest.mark.libtpu
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_text_report_names_compiler_topology_and_fit(capsys):
    assert main(["predict-hlo", "llama_decode", "--mesh", "2x2", "--chip", "tpu-v5p",
                 "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "XLA:TPU (libtpu" in out and "for v5p:2x2x1" in out
    assert "memory per chip:" in out and "fits" in out
    assert "the simulated step vs the book" in out and "cpu_excess" in out
    # its times carry their unit: in the header, or in each cell where they span ns to us
    step_row = next(line for line in out.splitlines() if line.startswith("│ step "))
    assert "cpu_excess (" in out or re.search(r"\d (ns|us|ms|s) +│$", step_row)
    assert "played at the roofline" in out and "the simulated step is" in out


@pytest.mark.slow
@pytest.mark.libtpu
@pytest.mark.parametrize("preset, mesh", [("70b", "8x8"), ("405b", "16x16")])
def test_real_size_train_step_on_v5p(capsys, preset, mesh):
    assert main(["predict-hlo", "llama_train", "--preset", preset, "--mesh", mesh,
                 "--set", "parallelism=fsdp_tp", "--chip", "tpu-v5p", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    chip = out["chips"][0]
    assert out["compiles"]["tpu-v5p"]["topology"] == tpu.topology_name("tpu-v5p", (
        tuple(int(d) for d in mesh.split("x"))))
    assert chip["totals"]["unmodeled_ops"] == 0 and chip["memory_fit"]["peak_bytes"] > 0
    assert {r["part"] for r in chip["book_gap"]} == {*step.PARTS, "step"}


def test_permute_group_is_one_ring():
    from harness.hlo.desc import _largest_ring

    # a collective matmul's shift: 8 rings of 8 over 64 devices (70B fsdp_tp on v5p 8x8)
    rings = [(r * 8 + i, r * 8 + (i + 1) % 8) for r in range(8) for i in range(8)]
    assert _largest_ring(rings) == 8
    assert _largest_ring([(0, 1), (2, 3), (3, 4)]) == 3


def test_without_libtpu_a_tpu_chip_costs_the_cpu_compile_and_says_so(capsys, monkeypatch):
    monkeypatch.setattr(tpu, "libtpu_available", lambda: False)
    assert main(["predict-hlo", "matmul", "--mesh", "2x2", "--chip", "tpu-v5e", "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if "libtpu is not installed" in line]
    assert len(notes) == 1 and "pip install 'scaling-harness[tpu]'" in notes[0]
    assert any(line.startswith("tpu-v5e: XLA:CPU on 4 virtual CPU devices") for line in out)
    assert not any(line.startswith("memory per chip") for line in out)


@pytest.mark.libtpu
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_second_run_reads_the_compile_from_the_cache(capsys):
    argv = ["predict-hlo", "matmul", "--mesh", "2x2", "--chip", "tpu-v5e", "--compiler", "tpu",
            "--set", "B=128", "--format", "json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert not first["compiles"]["tpu-v5e"]["cached"] and second["compiles"]["tpu-v5e"]["cached"]
    assert second["chips"][0]["totals"] == first["chips"][0]["totals"]
    assert main([*argv, "--no-compile-cache"]) == 0
    assert not json.loads(capsys.readouterr().out)["compiles"]["tpu-v5e"]["cached"]


def test_a_config_libtpu_refuses_is_reported_its_cpu_program_not_a_bound(capsys, monkeypatch):
    from workloads import aot

    real = aot.start_compile

    class Refused:
        def result(self):
            raise aot.HbmExhausted("XLA:TPU for v5e:2x2: Ran out of memory on HBM, the total "
                                   "memory required for HLO temporaries (19.16G) exceeds "
                                   "available HBM (15.75G).")

    def fake(*args, tpu_chip=None, **kw):
        return Refused() if tpu_chip else real(*args, tpu_chip=None, **kw)

    monkeypatch.setattr(aot, "start_compile", fake)
    monkeypatch.setattr(tpu, "libtpu_available", lambda: True)
    assert compile_keys(["tpu-v5e"], "auto", True)[0] == {"tpu-v5e": "tpu-v5e"}
    assert main(["predict-hlo", "matmul", "--mesh", "2x2", "--chip", "tpu-v5e", "--format",
                 "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    chip = out["chips"][0]
    assert chip["compile"] == "cpu" and chip["memory_fit"]["fits"] is False
    assert out["refused"]["tpu-v5e"]["required_bytes"] == pytest.approx(19.16 * 2**30)
    assert "NOT a TPU bound" in chip["priced_program"]
    assert schema.MFU_AT_ROOFLINE not in chip["totals"]


def test_libtpu_flags_name_their_own_compile(monkeypatch):
    from workloads import aot_cache
    args = ("llama_train", "70b", {"B": "8"}, "16x16", "tpu-v6e")
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    plain, cpu = aot_cache.key(*args), aot_cache.key(*args[:4], None)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=98304")
    assert aot_cache.key(*args) != plain
    assert aot_cache.key(*args[:4], None) == cpu   # XLA:CPU does not read libtpu's flags
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")
    assert aot_cache.key(*args) == plain
