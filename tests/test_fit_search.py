"""``predict-hlo`` with no remat given picks the policy with the least recomputation that fits
(``harness.plan.remat``): on a stand-in compiler that refuses some policies, and,
marked ``slow``, through libtpu on a config whose activations overflow a v5e's 16 GB."""
import pytest

import workloads
from harness.plan import remat
from workloads import aot

TRAIN = workloads.get("llama_train")


class _Job:
    def __init__(self, refused: bool):
        self.refused = refused

    def result(self):
        if self.refused:
            raise aot.HbmExhausted("Ran out of memory on HBM (stand-in)")
        return "compiled"


def test_the_first_policy_that_fits_is_taken_and_the_refused_ones_named(monkeypatch):
    too_big = {"none", "minimal_with_context", "dots"}
    tried = []

    def fake(name, preset, overrides, mesh, tpu_chip=None, cache_dir=None):
        tried.append(overrides["remat"])
        assert (name, preset, mesh, tpu_chip) == ("llama_train", "8b", "16x16", "tpu-v6e")
        return _Job(overrides["remat"] in too_big)

    monkeypatch.setattr(aot, "start_compile", fake)
    lines = []
    overrides, note = remat.choose(TRAIN, "8b", {"B": "1024"}, "16x16", "tpu-v6e", None,
                                          lines.append)
    assert tried == ["none", "minimal_with_context", "dots", "minimal"]
    assert overrides == {"B": "1024", "remat": "minimal"}
    assert note == ("remat=minimal (no remat given): the least recomputation that fits "
                    "tpu-v6e's HBM (none, minimal_with_context, dots: do not fit)")
    assert sum("does not fit tpu-v6e" in line for line in lines) == 3  # progress, per policy


def test_when_nothing_fits_the_last_policy_stays_and_the_note_says_so(monkeypatch):
    monkeypatch.setattr(aot, "start_compile", lambda *a, **k: _Job(True))
    overrides, note = remat.choose(TRAIN, "8b", {}, "16x16", "tpu-v6e", None)
    assert overrides == {"remat": "full"} and note.startswith("no remat policy fits tpu-v6e")


def test_only_without_remat_for_a_tpu_compile_of_a_workload_with_policies():
    assert remat.wanted(TRAIN, {"B": "8"}, "tpu-v5p")
    assert not remat.wanted(TRAIN, {"remat": "full"}, "tpu-v5p")
    assert not remat.wanted(TRAIN, {}, None)                  # XLA:CPU judges no fit
    assert not remat.wanted(workloads.get("llama_decode"), {}, "tpu-v5p")
    assert TRAIN.remat_order[0] == "none" and TRAIN.remat_order[-1] == "full"


@pytest.mark.slow
@pytest.mark.libtpu
def test_libtpu_refuses_keeping_everything_and_a_policy_that_keeps_less_fits():
    # 32 layers of D = 512 over 4 x 8192 tokens per chip: ~20·D·tokens·L·2 bytes = 21 GB of
    # activations kept without remat, 1 GB of layer inputs with full remat; a v5e has 16 GB
    sets = {"L": "32", "D": "512", "F": "2048", "N": "8", "K": "4", "H": "128", "B": "16",
            "T": "8192", "parallelism": "fsdp"}
    overrides, note = remat.choose(TRAIN, "tiny", sets, "2x2", "tpu-v5e", None)
    assert overrides["remat"] not in ("none", "full")
    assert note.startswith(f"remat={overrides['remat']} (no remat given)") and "none" in note
