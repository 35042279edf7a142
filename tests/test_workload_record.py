"""A workload is one record: defined in one place (here, in the test), it gets its book figure,
its memory knobs in an out-of-memory message and its sweep figures, with nothing in harness/
naming it."""
import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import workloads
from harness import schema
from harness.capture.memory import OutOfMemory
from harness.record import Run
from harness.runs.workload import _knobs, build_workload, run_workload
from harness.sweep import report as sweep_report
from predictions import collectives, hardware
from predictions.step import COLLECTIVE, MATMUL, Analytic, BookPart, book_dtype, with_overlap
from workloads.base import BusBytes, SweepFigures, Workload, smaller
from workloads.mesh import named

NAME = "gemm_allreduce"


@dataclass(frozen=True)
class GemmConfig:
    """``Z[B, F] = AllReduce_X(X[B, D_X] @ W[D_X, F])`` (`sharding.md` case 3)."""

    B: int = 1024
    D: int = 128
    F: int = 1024
    dtype: str = "bfloat16"


def build(cfg: GemmConfig, mesh, abstract: bool = False):
    if cfg.B > 1 << 20:  # stands in for XLA running out of device memory on a huge preset
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating Z")
    specs = (P(None, "X"), P("X", None))
    body = jax.shard_map(lambda x, w: jax.lax.psum(x @ w, "X"), mesh=mesh, in_specs=specs,
                         out_specs=P(), check_vma=False)
    shardings = tuple(named(mesh, s) for s in specs)
    fn = jax.jit(body, in_shardings=shardings, out_shardings=named(mesh, P()))
    x_BD = jnp.ones((cfg.B, cfg.D), cfg.dtype)
    w_DF = jnp.ones((cfg.D, cfg.F), cfg.dtype)
    return fn, tuple(jax.device_put(a, s) for a, s in zip((x_BD, w_DF), shardings))


def _z_bytes(cfg: GemmConfig) -> int:
    return cfg.B * cfg.F * jnp.dtype(cfg.dtype).itemsize  # the partial sums Z{U_X}


def book(cfg: GemmConfig, mesh, chip) -> Analytic:
    n = dict(mesh.shape)["X"]
    flops = 2.0 * cfg.B * cfg.D * cfg.F  # roofline.md
    t_math = flops / (n * hardware.chip_entry(chip).flops_per_s(book_dtype(cfg.dtype)))
    t_comm = collectives.all_reduce(_z_bytes(cfg), (n,), chip)  # sharding.md
    parts = {MATMUL: BookPart(t_math, flops / n, "2BDF / (n C)"),
             COLLECTIVE: BookPart(t_comm, _z_bytes(cfg), "AllReduce_X of Z")}
    step_s = max(t_math, t_comm)
    return Analytic(flops, step_s, "max(2BDF/(n C), AllReduce_X(Z))",
                    parts=with_overlap(step_s, parts, "max, not the sum"))


def figures(cfg: GemmConfig, mesh) -> SweepFigures:
    n, b = dict(mesh.shape)["X"], float(_z_bytes(cfg))
    bus = collectives.BUS_BYTES["all-reduce"](b, n)
    return SweepFigures(f"D={cfg.D}, {cfg.dtype}", efficiency_of=("matmul",),
                        bus=BusBytes("all_reduce", n, b, bus))


GEMM = Workload(name=NAME, Config=GemmConfig, build=build,
                presets={"tiny": GemmConfig(), "huge": GemmConfig(B=1 << 21)},
                description="Z = AllReduce_X(X[B, D_X] @ W[D_X, F])",
                book=book, figures=figures, memory_knobs=smaller("B", "F"))


@pytest.fixture
def registered(monkeypatch):
    """``GEMM`` in ``workloads.WORKLOADS``, as ``workloads/__init__.py`` lists its records."""
    monkeypatch.setitem(workloads.WORKLOADS, GEMM.name, GEMM)
    return GEMM


# tpu-v5p (hardware.md): 4.59e14 bf16 FLOP/s; an axis of 4 wraps, so W = 2 x 9e10 bytes/s
C, W = 4.59e14, 2 * 9e10
B, D, F, n = 1024, 128, 1024, 4            # the tiny preset on mesh 4x2: X = 4
V = B * F * 2                               # bf16 partial sums, 2 MiB
T_MATH = 2 * B * D * F / (n * C)            # 1.5e-7 s
T_COMM = 2 * V / W                          # sharding.md: AllReduce = 2V/W, 2.3e-5 s
BUS = 2 * V * (n - 1) / n                   # nccl-tests' busbw bytes of an all-reduce


def test_its_book_figure_reaches_the_run(registered):
    built = build_workload(NAME, "tiny", mesh="4x2")
    est = built.book("tpu-v5p")
    assert est.model_flops == 2 * B * D * F
    assert est.analytic_s == pytest.approx(max(T_MATH, T_COMM)) == pytest.approx(T_COMM)
    assert sum(p.seconds for p in est.parts.values()) == pytest.approx(est.analytic_s)


def test_its_memory_knobs_name_its_own_fields_in_the_oom_message(registered, tmp_path):
    assert _knobs(NAME) == ("--mesh over more devices, a smaller --set B, "
                                          "a smaller --set F")
    said = (f"{NAME} \\(huge\\) on mesh 4x2 ran out of device memory .*; what helps: "
            "--mesh over more devices, a smaller --set B, a smaller --set F$")
    with pytest.raises(OutOfMemory, match=said):
        run_workload(NAME, preset="huge", mesh="4x2", out=tmp_path)


def test_its_sweep_figures_come_from_its_stored_run(registered, tmp_path):
    path = run_workload(NAME, mesh="4x2", chip="tpu-v5p", steps=2, warmup=1,
                        out=tmp_path, with_plots=False).path
    run = Run.load(path)
    assert run.summary[schema.ANALYTIC_S] == pytest.approx(T_COMM)
    assert run.summary[schema.MODEL_FLOPS] == 2 * B * D * F
    record = {"index": 0, "workload": NAME, "preset": "tiny", "mesh": "4x2", "overrides": {},
              "status": "done", "run": path.name, "key": "k"}
    row = sweep_report.point_row(record, tmp_path)
    collective_s = float(run.ops.loc[run.ops[schema.CATEGORY] == "collective",
                                     schema.MEASURED_S].sum())
    assert collective_s > 0
    assert row[schema.SERIES] == "D=128, bfloat16"
    assert (row[schema.COLLECTIVE], row[schema.GROUP_SIZE]) == ("all_reduce", 4)
    assert row[schema.MESSAGE_BYTES] == V and row[schema.BUS_BYTES] == BUS == 3 * 2**20
    assert row[schema.COLLECTIVE_S] == pytest.approx(collective_s)
    assert row[schema.MEASURED_BUS_GBPS] == pytest.approx(BUS / collective_s / 1e9)
    # the book's bus bandwidth of a ring all-reduce is (n-1)/n of W: 135 GB/s
    assert row[schema.PREDICTED_BUS_GBPS] == pytest.approx(W * (n - 1) / n / 1e9)
    # roofline efficiency: predicted over measured time of the modeled matmul ops
    matmuls = run.ops[run.ops[schema.CATEGORY] == "matmul"].dropna(subset=[schema.PREDICTED_S])
    assert len(matmuls) and row[schema.MATMUL_EFFICIENCY] == pytest.approx(
        matmuls[schema.PREDICTED_S].sum() / matmuls[schema.MEASURED_S].sum())


def test_registered_workloads_keep_their_knobs_and_name_real_fields():
    assert {name: _knobs(name) for name in workloads.WORKLOADS} == {
        "matmul": "--mesh over more devices, a smaller --set B",
        "collective": "--mesh over more devices",
        "llama_train": "--mesh over more devices, a smaller --set B, a smaller --set T, "
                       "--set remat=full",
        "llama_prefill": "--mesh over more devices, a smaller --set B, a smaller --set S, "
                         "a smaller --set T",
        "llama_decode": "--mesh over more devices, a smaller --set B, a smaller --set S, "
                        "a smaller --set T",
        "llama_generate": "--mesh over more devices, a smaller --set B, a smaller --set S, "
                          "a smaller --set T",
    }
    mesh = SimpleNamespace(shape={"X": 4, "Y": 2})
    for w in workloads.WORKLOADS.values():
        fields = {f.name for f in dataclasses.fields(w.Config)}
        assert set(w.memory_knobs) <= fields, w.name
        if w.figures is not None:  # the op categories it asks for have a summary column
            assert set(w.figures(w.presets["tiny"], mesh).efficiency_of) <= set(
                sweep_report.EFFICIENCY_OF), w.name
    assert _knobs("no_such_workload") == "--mesh over more devices"
