"""``harness plan``: the book's verdict numbers by arithmetic (training.md §6.2), the layouts
tried and where their axes lie, the ranking (a layout that does not fit or cannot be built goes
last, saying why), the CLI's errors; through libtpu (slow), a small LLaMA on a v5p 2x2x2 ranks
FSDP and TP in the book's order on both sides of the critical batch; the real 8B and 70B on a
v5p 4x4x4 (heavy)."""
import json
import math

import pytest

from harness import schema
from harness.cli import main
from harness.plan import Setting, candidates, ranked, spans
from harness.plan import rank as plan_rank
from harness.plan.layouts import Candidate
from predictions import hardware, training
from workloads import aot

V5P = hardware.chip_entry("tpu-v5p")
ALPHA_V5P = 4.59e14 / (2 * 9e10)  # book: C / W_ici, W bidirectional = 2 x 9e10 B/s = 2,550


def test_fsdp_needs_850_tokens_per_chip_when_its_axis_spans_three_physical_axes():
    assert ALPHA_V5P == pytest.approx(2550)
    # TR-EX1: B/X > alpha/M_X; over all three axes of a v5p slice, 2550/3 = 850 per chip
    v = training.verdict("fsdp", 1024 * 64, V5P, 64, 1, (3, 1))
    assert v.need == pytest.approx(2550 / 3) and v.have == 1024 and v.bound == "compute"
    assert training.verdict("fsdp", 800 * 64, V5P, 64, 1, (3, 1)).bound == "comm"
    # one axis: 2,550 per chip
    assert training.verdict("dp", 2000 * 8, V5P, 8, 1, (1, 1)).need == pytest.approx(2550)


def test_fsdp_tp_and_tp_conditions_are_the_books():
    # TR-Q3 (LLaMA-2 13B, F = 13,824, 3M tokens on 4096 chips, M_X*M_Y = 2):
    # B/N = 732 > 2550^2/(2*13,824) = 235 -> compute-bound
    v = training.verdict("fsdp_tp", 3e6, V5P, 1024, 4, (2, 1), F=13824)
    assert v.need == pytest.approx(2550 ** 2 / (2 * 13824))
    assert v.have == pytest.approx(3e6 / 4096) and v.bound == "compute"
    # TP: Y < M_Y*F/alpha; LLaMA-3 8B's F = 14,336 over one axis allows 14336/2550 = 5.6-way
    assert training.verdict("tp", 1e6, V5P, 1, 4, (1, 1), F=14336).bound == "compute"
    v = training.verdict("tp", 1e6, V5P, 1, 8, (1, 1), F=14336)
    assert v.need == pytest.approx(14336 / 2550) and v.bound == "comm"
    assert v.condition == "Y=8 >= M_Y*F/alpha=5.62"
    with pytest.raises(ValueError, match="valid|choose one of"):
        training.verdict("pp", 1e6, V5P, 1, 8)


def test_mesh_axes_span_the_physical_axes_they_are_laid_on():
    assert spans((64, 1), (4, 4, 4)) == (3, 1)   # every chip on X: all three torus axes
    assert spans((1, 64), (4, 4, 4)) == (1, 3)
    assert spans((16, 4), (4, 4, 4)) == (2, 1)
    assert spans((8, 8), (4, 4, 4)) == (2, 2)    # each 8 splits a 4 with the other
    assert spans((16, 4), (64,)) == (1, 1)       # a GPU count: no torus, M = 1


def test_candidates_put_fsdp_tp_at_the_books_x_opt():
    cands = {c.layout: c for c in candidates([], 14336, 16384, (4, 4, 4))}
    assert list(cands) == ["dp", "fsdp", "tp", "fsdp_tp"]
    assert (cands["fsdp"].X, cands["fsdp"].M_X) == (64, 3)
    assert (cands["tp"].Y, cands["tp"].M_Y) == (64, 3)
    # X_opt = sqrt(B/F * M_X/M_Y * N): 8x8 spans 2x2, so sqrt(16384/14336 * 1 * 64) = 8.55
    # rounds to 8, whose mesh 8x8 is the one assumed
    assert math.sqrt(16384 / 14336 * 64) == pytest.approx(8.55, abs=0.01)
    c = cands["fsdp_tp"]
    assert (c.X, c.Y, c.M_X, c.M_Y) == (8, 8, 2, 2)
    # a batch whose X_opt is all 64 chips stays a mix: X <= N/2
    big = candidates(["fsdp_tp"], 14336, 4 * 1024 * 1024, (4, 4, 4))[0]
    assert (big.X, big.Y) == (32, 2) and "clamped" in big.note


def test_ranked_by_step_then_what_does_not_fit_then_what_cannot_be_built():
    rows = [{schema.LAYOUT: "dp", schema.FITS: "no", schema.PLAN_NOTE: "does not fit"},
            {schema.LAYOUT: "tp", schema.FITS: "cannot be built"},
            {schema.LAYOUT: "fsdp", schema.FITS: "yes", schema.PREDICTED_STEP_S: 2.0},
            {schema.LAYOUT: "fsdp_tp", schema.FITS: "yes", schema.PREDICTED_STEP_S: 1.0}]
    assert ranked(rows)[schema.LAYOUT].tolist() == ["fsdp_tp", "fsdp", "dp", "tp"]
    assert list(ranked(rows).columns) == list(schema.PLAN)


def test_orders_agree_unless_the_prediction_reverses_a_pair_the_book_orders():
    from harness.plan.rank import orders_agree

    book = [["fsdp", "fsdp_tp"], ["tp"]]  # the book ties fsdp and fsdp_tp
    assert orders_agree(book, ["fsdp_tp", "fsdp", "tp"])
    assert orders_agree(book, ["fsdp", "tp"])
    assert not orders_agree(book, ["tp", "fsdp"])


def _setting(**overrides):
    return Setting("llama_train", "8b", {"B": "64", "T": "256", **overrides}, V5P, (4, 4, 4),
                   "tpu-v5p")


def test_a_refused_compile_is_ranked_last_with_the_compilers_reason(monkeypatch):
    class Refused:
        def result(self):
            raise aot.HbmExhausted("XLA:TPU for v5p:4x4x4: Ran out of memory on HBM, used 130G "
                                   "of 95.7G (stand-in)")

    monkeypatch.setattr(aot, "start_compile", lambda *a, **k: Refused())
    lines = []
    row = plan_rank.evaluate(_setting(), Candidate("dp", 64, 1, 3, 1), lines.append)
    assert row[schema.FITS] == "no"
    assert row[schema.PLAN_NOTE] == "does not fit: Ran out of memory on HBM, used 130G of 95.7G " \
                                    "(stand-in)"
    assert row[schema.BOOK_BOUND] == "comm"  # 16384 tokens / 64 = 256 per chip <= 850
    assert lines == ["dp on 64x1: compiling ...", "dp on 64x1: does not fit (0 s)"]


def test_a_layout_the_model_cannot_take_says_why_without_compiling(monkeypatch):
    monkeypatch.setattr(aot, "start_compile", lambda *a, **k: pytest.fail("compiled"))
    # LLaMA-3 8B has 32 query heads: 64-way TP cannot split them
    row = plan_rank.evaluate(_setting(), Candidate("tp", 1, 64, 1, 3), lambda line: None)
    assert row[schema.FITS] == "cannot be built" and "N=32" in row[schema.PLAN_NOTE]


@pytest.mark.parametrize("argv, says", [
    (["--chip", "tpu-v9"], "known chips"),
    (["--layout", "pp"], "valid: dp, fsdp, tp, fsdp_tp, dp_tp"),
    (["--topology", "2x4x8"], "as 4x4x4"),
    (["--topology", "3x3x1"], "valid slices nearby: 8 (v5p:2x2x2), 12 (v5p:2x2x3)"),
    (["--batch", "1000", "--seq-len", "16"], "multiple of 16"),
    (["--batch", "lots"], "256seq"),
    (["llama_prefill"], "valid: llama_train, llama_decode"),  # llama_decode: serving (issue 55)
])
def test_bad_input_is_one_line_exit_2(capsys, argv, says):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_tiny_plan_through_the_cpu_compiler(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_HARNESS_CACHE", str(tmp_path))
    rc = main(["plan", "--chip", "tpu-v5p", "--topology", "2x2x2", "--compiler", "cpu",
               "--layout", "fsdp", "--layout", "tp", "--batch", "8seq", "--seq-len", "16",
               "--format", "json"])
    assert rc == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["tokens"] == 8 * 16 and out["alpha"] == pytest.approx(2550)
    rows = out["layouts"]
    assert {r[schema.LAYOUT] for r in rows} == {"fsdp", "tp"}
    steps = [r[schema.PREDICTED_STEP_S] for r in rows]
    assert steps == sorted(steps) and all(s > 0 for s in steps)
    for r in rows:
        assert 0 < r[schema.PREDICTED_EXPOSED_COMM_S] <= r[schema.PREDICTED_STEP_S]
        assert r[schema.PEAK_BYTES] > 0 and r[schema.FITS] == "yes"
        # 128 tokens on 8 chips: 16 per chip, far below 850; TP's F = 128 << 8 * 2550 / 3
        assert r[schema.BOOK_BOUND] == "comm"
    assert "compiling ..." in captured.err and "done in" in captured.err


# A layer of D = 512, F = 2048, 8 heads of 64: on a v5p 2x2x2 each layout's mesh axis spans
# all three torus axes (M = 3). FSDP is compute-bound above 2550/3 = 850 tokens per chip; TP
# with Y = 8 needs F > 8 * 2550 / 3 = 6,800 and so is comm-bound at any batch.
SMALL = ["--set", "L=1", "--set", "D=512", "--set", "F=2048", "--set", "N=8", "--set", "K=8",
         "--set", "H=64", "--set", "V=256", "--set", "remat=full"]


def _plan(capsys, batch: str, seq: str) -> dict:
    assert main(["plan", "--chip", "tpu-v5p", "--topology", "2x2x2", "--compiler", "tpu",
                 "--layout", "fsdp", "--layout", "tp", "--batch", batch, "--seq-len", seq,
                 "--format", "json", *SMALL]) == 0
    out = json.loads(capsys.readouterr().out)
    return {r[schema.LAYOUT]: r for r in out["layouts"]}


@pytest.mark.slow
@pytest.mark.libtpu
def test_libtpu_ranks_fsdp_and_tp_in_the_books_order_on_both_sides_of_the_critical_batch(
        capsys):
    # well above: 128 x 256 = 32,768 tokens, 4,096 per chip > 850: FSDP compute-bound, TP not
    above = _plan(capsys, "128seq", "256")
    assert above["fsdp"][schema.BOOK_BOUND] == "compute"
    assert above["tp"][schema.BOOK_BOUND] == "comm"
    assert above["fsdp"][schema.PREDICTED_STEP_S] < above["tp"][schema.PREDICTED_STEP_S]
    # well below: 8 x 32 = 256 tokens, 32 per chip: both comm-bound, and per layer FSDP
    # gathers 2 bytes x (3DF + 2D(N+K)H) = 8.4 MB of weights where TP gathers 2 blocks x
    # 2 bytes x B x D = 0.5 MB of activations: TP is faster
    below = _plan(capsys, "8seq", "32")
    assert 2 * (3 * 512 * 2048 + 2 * 512 * 16 * 64) > 8 * 2 * 2 * 256 * 512
    assert {r[schema.BOOK_BOUND] for r in below.values()} == {"comm"}
    assert below["tp"][schema.PREDICTED_STEP_S] < below["fsdp"][schema.PREDICTED_STEP_S]
    for rows in (above, below):
        assert all(r[schema.PREDICTED_BOUND] == r[schema.BOOK_BOUND] for r in rows.values())


def _real(capsys, preset: str, batch: str, seq: str) -> dict:
    assert main(["plan", "--preset", preset, "--chip", "tpu-v5p", "--topology", "4x4x4",
                 "--batch", batch, "--seq-len", seq, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.heavy  # eight real-size compiles per model: 10-20 min on a 2-core host
@pytest.mark.libtpu
@pytest.mark.parametrize("preset", ["8b", "70b"])
def test_real_llama_on_v5p_4x4x4_both_sides_of_the_critical_batch(capsys, preset):
    # 850 tokens per chip x 64 chips = 54,400 tokens: 1M tokens is above, 16k below
    above = _real(capsys, preset, "256seq", "4096")
    rows = {r[schema.LAYOUT]: r for r in above["layouts"]}
    assert rows["fsdp"][schema.BOOK_BOUND] == "compute"
    assert rows["dp"][schema.FITS] != "yes"  # 10 bytes per parameter on every chip
    # the book's order over the layouts that fit, and the prediction's, agree
    assert above["orders_agree"], (above["book_order"], above["predicted_order"])
    below = _real(capsys, preset, "64seq", "256")
    rows = {r[schema.LAYOUT]: r for r in below["layouts"]}
    assert rows["fsdp"][schema.BOOK_BOUND] == "comm"
    assert below["predicted_order"][0] != "fsdp"
    for out in (above, below):
        assert all(r[schema.PEAK_BYTES] > 0 for r in out["layouts"] if r[schema.FITS] == "yes")
