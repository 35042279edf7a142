"""The measured step of 8-device CPU runs of the collective-heavy workloads: each collective
kind, the matmul cases that communicate, and LLaMA training, prefill and decode steps. The
decomposition adds up on every device, the replayed schedule lands on the measured step, the
collectives the program runs are the ones the step names, a program that communicates nothing
has no communication in its step, and XLA:CPU's collectives, synchronous, hide under
nothing."""
from __future__ import annotations

import pytest

from harness import schema
from harness.runs.workload import build_workload, run_built

# (workload, overrides): each shard_map collective, the matmul cases with communication and
# one without, a training step
POINTS = [("collective", {"kind": k}) for k in
          ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ppermute")]
POINTS += [("matmul", {"case": c}) for c in ("no_comm", "allgather", "allreduce")]
POINTS += [("llama_train", {}), ("llama_prefill", {}), ("llama_decode", {})]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = {}

    def get(name: str, overrides: dict):
        key = (name, tuple(sorted(overrides.items())))
        if key not in cache:
            built = build_workload(name, "tiny", overrides)
            # predicted for a data-sheet chip: the measured step needs no CPU calibration
            cache[key] = run_built(built, preset="tiny", overrides=overrides, steps=3, warmup=1,
                                   out_dir=tmp_path_factory.mktemp("trace"), chip="h100")
        return cache[key]
    return get


@pytest.mark.parametrize(("name", "overrides"), POINTS,
                         ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in POINTS])
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_step_adds_up_on_all_eight_devices(name, overrides, runs):
    run = runs(name, overrides)
    step = run.step
    devices = step[schema.DEVICES]
    assert sorted(d[schema.DEVICE] for d in devices) == list(range(8))
    assert not any(d.get(schema.IDLE_DEVICE) for d in devices)
    for d in devices:
        assert d[schema.COMPUTE_S] + d[schema.EXPOSED_COMM_S] + d[schema.IDLE_S] == \
            pytest.approx(d[schema.STEP_S], rel=0.01)
        assert d[schema.OVERLAPPED_COMM_S] + d[schema.EXPOSED_COMM_S] == \
            pytest.approx(d[schema.COMM_S], rel=0.01, abs=1e-12)
    # the schedule replayed at the measured times lands on the step it replays
    assert step[schema.REPLAY_STEP_S] == pytest.approx(step[schema.STEP_S], rel=0.05)
    collectives = set(run.ops.loc[run.ops[schema.CATEGORY] == schema.CAT_COLLECTIVE, schema.OP])
    named = {c[schema.OP] for c in step.get(schema.STEP_COLLECTIVES, [])}
    if collectives:  # the step's communication is the program's collectives, and only those
        assert step[schema.COMM_S] > 0 and named and named <= collectives
    else:
        assert step[schema.COMM_S] == 0 and not named


def test_a_collective_alone_is_all_exposed(runs):
    """A shard_map all-gather and nothing else: no compute to hide under, so what the step
    communicates is exposed, all of it."""
    step = runs("collective", {"kind": "all_gather"}).step
    assert step[schema.OVERLAPPED_COMM_S] <= 0.05 * step[schema.COMM_S]
    assert step[schema.REGIME] == "communication-bound"


def test_synchronous_collectives_hide_under_nothing(runs):
    """XLA:CPU runs a collective on the device's own thread, between its other ops: a loop's
    interval encloses its body's ops and is left out, so little overlaps the all-reduces of a
    training step (before containers were left out, the layer loop's interval counted as
    compute over them, all of it). What does overlap is real: a dot XLA:CPU completes
    asynchronously on its thread pool runs on, timed to its completion
    (``harness.trace.completions``), while the device's thread enters the next collective; in
    two runs it hid 0.5% and 6.4% of the communication."""
    step = runs("llama_train", {}).step
    assert step[schema.OVERLAPPED_COMM_S] <= 0.2 * step[schema.COMM_S]
