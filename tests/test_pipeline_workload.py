"""``llama_train`` pipelined (issue 53): the schedules' tables and their bubble against the
formula, gradients equal to the unpipelined step's, the stage-to-stage permutes' bytes, ZeRO-1,
gradient accumulation and the one-line errors. On 8 virtual CPU devices, tiny fp32 configs."""
from __future__ import annotations

import dataclasses
import re

import jax
import numpy as np
import pytest

import workloads
from workloads.base import WorkloadError, with_layout
from workloads.llama import microbatches, model, pipeline, pipelined, schedules, train
from workloads.llama.config import dims_of
from workloads.llama.sharding import Sharder
from workloads.mesh import abstract_mesh, make_mesh


# --- the schedules: what runs at each tick, and the bubble counted from it ----------------------
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S, M, expected", [(4, 8, 3 / 11), (2, 3, 1 / 4)])
def test_the_bubble_counted_from_the_schedule_is_the_formula(name, S, M, expected):
    # (S − 1)/(M + S − 1): 3/11 at S=4, M=8; 1/4 at S=2, M=3 (Huang et al.; Narayanan et al.)
    ticks = schedules.table(name, S, M)
    assert schedules.bubble(ticks) == pytest.approx(expected)
    # idle (stage, tick) slots: S − 1 of the M + S − 1 forward slots of each stage, and as many
    # backward: 2·S·(S − 1) = 24 at S=4, 4 at S=2, whatever M
    assert schedules.idle_slots(ticks) == 2 * S * (S - 1)


def test_a_circular_schedule_divides_the_bubble_by_its_repeats():
    # S=4, M=8, v=2: (S − 1)/(v·M + S − 1) = 3/19, against GPipe's 3/11; 2·8 + 3 ticks forward
    ticks = schedules.table("circular", 4, 8, 2)
    assert schedules.bubble(ticks, 2) == pytest.approx(3 / 19)
    assert len(ticks) == 2 * (2 * 8 + 3)
    assert ticks[5].forward[1] == schedules.Work(microbatch=4, repeat=0)    # k = 5 − 1 = 4
    assert ticks[9].forward[0] == schedules.Work(microbatch=1, repeat=1)    # k = 9: 9 mod 8


def test_what_each_stage_holds_per_schedule():
    # GPipe holds every microbatch; lockstep 1F1B 2(S − s) − 1 at stage s: 7, 5, 3, 1 at S=4
    assert schedules.in_flight(schedules.table("gpipe", 4, 8)) == [8, 8, 8, 8]
    assert schedules.in_flight(schedules.table("1f1b", 4, 8)) == [7, 5, 3, 1]
    tick = schedules.table("1f1b", 4, 8)[3]          # the last stage's first forward...
    assert tick.forward[3] == tick.backward[3] == schedules.Work(0)   # ...and its backward


def test_circular_storage_order_puts_each_stages_chunks_together():
    # L=8, S=4, v=2: stage s holds rows 2s, 2s+1 = model layers s (repeat 0) and 4 + s
    assert [pipeline.model_layer(i, 8, 4, 2) for i in range(8)] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert [pipeline.model_layer(i, 8, 4, 1) for i in range(8)] == list(range(8))


# --- the pipelined step's loss and gradients are the unpipelined step's --------------------------
CASES = {  # case -> (mesh: stage x data, or by role, overrides)
    "gpipe": ("4x2", dict(stages=4, microbatches=4)),
    "1f1b": ("4x2", dict(stages=4, microbatches=4)),
    "circular": ("2x4", dict(stages=2, microbatches=2, repeats=2)),
    # FSDP and TP inside each stage
    "gpipe pp+fsdp_tp": ("stage=2,fsdp=2,model=2",
                         dict(stages=2, microbatches=2, parallelism="pp+fsdp_tp")),
    "1f1b pp+tp": ("stage=2,model=4", dict(stages=2, microbatches=2, parallelism="pp+tp")),
}


def _cfg(**kw):
    base = dict(L=4, B=8, param_dtype="float32")
    return dataclasses.replace(train.PRESETS["tiny"], **{**base, **kw})


@pytest.fixture(scope="module")
def reference():
    cfg = _cfg()
    d = dims_of(cfg)
    params = model.init_params(d, 0, "float32")
    inputs, targets = train.batch(cfg)
    sh = Sharder(None, "dp", d)
    value, grads = jax.jit(jax.value_and_grad(
        lambda p: train.loss_fn(p, inputs, targets, cfg, sh)))(params)
    return params, inputs, targets, float(value), grads


@pytest.fixture(scope="module")
def piped(reference):
    """Per schedule: the pipelined (loss, grads) and the compiled program's HLO."""
    params, inputs, targets, *_ = reference
    cache = {}

    def get(name):
        if name not in cache:
            shape, kw = CASES[name]
            cfg = _cfg(**{"parallelism": "pp", "schedule": name.split()[0], **kw})
            mesh = make_mesh(shape)
            stage = pipeline.check_mesh(cfg, mesh)
            v = cfg.repeats
            order = [pipeline.model_layer(i, cfg.L, cfg.stages, v) for i in range(cfg.L)]
            stored = dict(params, layers=jax.tree.map(lambda a: a[np.array(order)],
                                                      params["layers"]))
            fn = pipelined.value_and_grads(cfg, Sharder(mesh, cfg.parallelism, dims_of(cfg)),
                                          dims_of(cfg), stage)
            compiled = jax.jit(fn).lower(stored, inputs, targets).compile()
            value, grads = compiled(stored, inputs, targets)
            back = np.argsort(order)   # stack rows back to model layers
            grads = dict(grads, layers=jax.tree.map(lambda a: np.asarray(a)[back],
                                                    grads["layers"]))
            cache[name] = (cfg, float(value), grads, compiled.as_text())
        return cache[name]
    return get


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_pipelined_gradients_equal_the_unpipelined_ones(name, reference, piped):
    *_, ref_value, ref_grads = reference
    _, value, grads, _ = piped(name)
    assert value == pytest.approx(ref_value, rel=1e-6)
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(grads),
                                 jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6,
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_a_padded_stack_runs_the_models_layers(name):
    # L=3 on 2 stages: 4 rows, an identity row first (stage 0: pad, layer 0; stage 1: 1, 2)
    cfg = _cfg(L=3, parallelism="pp", schedule=name, stages=2, microbatches=2, pad_layers=True)
    assert pipeline.stack_rows(cfg) == 4 and list(pipeline.active_rows(cfg)) == [0, 1, 1, 1]
    d = dims_of(cfg)
    params = model.init_params(d, 0, "float32")
    inputs, targets = train.batch(cfg)
    ref_value, ref_grads = jax.jit(jax.value_and_grad(lambda p: train.loss_fn(
        p, inputs, targets, cfg, Sharder(None, "dp", d))))(params)
    mesh = make_mesh("2x4")
    pad = jax.tree.map(lambda a: np.concatenate([a[:1] * 0 + 7, a]), params["layers"])
    fn = pipelined.value_and_grads(cfg, Sharder(mesh, "pp", d), d, pipeline.check_mesh(cfg, mesh))
    value, grads = jax.jit(fn)(dict(params, layers=pad), inputs, targets)
    assert float(value) == pytest.approx(float(ref_value), rel=1e-6)
    got = jax.tree.map(lambda a: np.asarray(a), grads["layers"])
    for key, want in ref_grads["layers"].items():
        assert not got[key][0].any(), key         # the identity row learns nothing
        np.testing.assert_allclose(got[key][1:], want, rtol=1e-4, atol=1e-6, err_msg=key)


def test_each_tick_permutes_one_microbatchs_activations(piped):
    # GPipe, S=4, M=4 on stage=4 x data=2: a microbatch is B/M = 2 sequences, 1 a device, of
    # T=16 tokens x D=64 fp32: 1·16·64·4 = 4096 bytes each device sends each tick, in the
    # forward loop and its transpose, each of M + S − 1 = 7 ticks
    cfg, _, _, hlo = piped("gpipe")
    permutes = [ln for ln in hlo.splitlines()
                if " collective-permute(" in ln and "ppermute" in ln]
    assert len(permutes) == 2, permutes
    for line in permutes:
        dims = re.search(r"= f32\[([\d,]+)\]", line).group(1)
        assert np.prod([int(x) for x in dims.split(",")]) * 4 == 4096
    trips = re.findall(r'known_trip_count":\{"n":"(\d+)"', hlo)
    assert trips.count(str(cfg.microbatches + cfg.stages - 1)) >= 2


def test_gradient_accumulation_is_the_mean_of_the_microbatches(reference):
    params, inputs, targets, ref_value, ref_grads = reference
    cfg = _cfg()
    sh = Sharder(None, "dp", dims_of(cfg))
    run = microbatches.accumulate(jax.value_and_grad(train.loss_fn), 4)
    value, grads = jax.jit(lambda p: run(p, inputs, targets, cfg, sh))(params)
    assert float(value) == pytest.approx(ref_value, rel=1e-6)
    np.testing.assert_allclose(grads["unembed_DV"], ref_grads["unembed_DV"], rtol=1e-4,
                               atol=1e-6)


def test_zero1_shards_the_moments_not_the_weights():
    cfg = _cfg(L=4, parallelism="pp", stages=4, microbatches=2, zero1=True)
    _, (p, o, _, _) = train.build(cfg, abstract_mesh("4x2"), abstract=True)
    assert tuple(p["layers"]["w_gate_DF"].sharding.spec) == ("X", None, None)
    assert tuple(o["mu"]["layers"]["w_gate_DF"].sharding.spec) == ("X", "Y", None)
    assert tuple(o["nu"]["unembed_DV"].sharding.spec) == ("Y", None)


# --- one line naming the valid choices ---------------------------------------------------------
@pytest.mark.parametrize("sets, says", [
    (dict(parallelism="pp", stages=3), "stages=3 x repeats=1 does not divide the L=2 layers; "
                                       "valid stages: 1, 2 (or more layers, --set L=6 or "
                                       "--preset tiny_pp; or --set pad_layers=true"),
    (dict(parallelism="pp", microbatches=3), "microbatches=3 does not divide the batch B=8; "
                                             "valid: 1, 2, 4, 8"),
    (dict(parallelism="fsdp", stages=2), "valid: pp, pp+dp, pp+fsdp, pp+tp, pp+fsdp_tp"),
    (dict(parallelism="pp", schedule="zb"), "valid: 1f1b, circular, gpipe"),
    (dict(parallelism="pp", repeats=2, L=4), "schedule=gpipe runs repeats=1"),
    (dict(parallelism="pp", schedule="circular", stages=2, microbatches=1),
     "valid microbatches: 2, 4, 8"),
])
def test_a_pipeline_that_cannot_run_is_one_line(sets, says):
    with pytest.raises(WorkloadError) as e:
        workloads.make_config("llama_train", "tiny", {k: str(v) for k, v in sets.items()})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_mesh_without_the_stage_axis_is_one_line():
    wl = workloads.get("llama_train")
    with pytest.raises(WorkloadError, match="layout pp has mesh axes stage, data; the mesh's "
                                            "are data"):
        with_layout(wl, {"parallelism": "pp"}, mesh="data=8")
    assert with_layout(wl, {}, mesh="stage=4,data=2") == {"parallelism": "pp"}
    cfg = workloads.make_config("llama_train", "tiny_pp", {"stages": "2"})
    with pytest.raises(WorkloadError, match="stages=2 but the mesh's stage axis X has 4"):
        pipeline.check_mesh(cfg, abstract_mesh("4x2"))


def test_1f1b_beside_tp_and_dp_is_one_line_not_a_crash():
    cfg = workloads.make_config("llama_train", "tiny", {"parallelism": "pp+dp_tp", "L": "4",
                                                        "stages": "2", "schedule": "1f1b"})
    with pytest.raises(WorkloadError, match="valid for 1f1b: pp, pp\\+fsdp, pp\\+tp"):
        pipeline.check_mesh(cfg, abstract_mesh("stage=2,data=2,model=2"))
    pipeline.check_mesh(dataclasses.replace(cfg, schedule="gpipe"),
                        abstract_mesh("stage=2,data=2,model=2"))


def test_harness_run_says_it_in_one_line_and_exits_2(capsys, tmp_path, monkeypatch):
    from harness import cli

    monkeypatch.setenv("XLA_FLAGS", "")
    code = cli.main(["run", "llama_train", "--set", "parallelism=pp", "--set", "stages=4",
                     "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "valid stages: 1, 2" in err[0]


def test_the_405b_preset_is_metas_layout():
    # 126 layers on 16 stages x 2 repeats: 128 rows, the first and the last run identity (one
    # fewer layer in the first and the last chunk); 16M tokens = 2048 x 8192; 8 x 16 x 128 =
    # 16,384 GPUs
    cfg = train.PRESETS["405b_meta"]
    assert (cfg.L, cfg.stages, cfg.B * cfg.T) == (126, 16, 16 * 2 ** 20)
    flags = pipeline.active_rows(cfg)
    assert pipeline.stack_rows(cfg) == 128 and flags.sum() == 126
    # stack row 0 runs first (stage 0, repeat 0); row 127 last (stage 15, repeat 1)
    assert flags[0] == flags[127] == 0
    # built (not compiled) at 2-way data parallelism, 16 sequences a replica
    small = dataclasses.replace(cfg, B=32)
    _, (p, o, x, _) = train.build(small, abstract_mesh("stage=16,data=2,model=8"), abstract=True)
    assert p["layers"]["w_up_DF"].shape == (128, 16384, 53248)
    assert tuple(p["layers"]["w_up_DF"].sharding.spec) == ("stage", None, "model")
    assert tuple(o["mu"]["layers"]["w_up_DF"].sharding.spec) == ("stage", "data", "model")


def test_microbatches_that_do_not_split_over_the_batch_axes_are_one_line():
    # B=8, M=8: one sequence a microbatch, not divisible by the data axis Y (2 devices)
    cfg = workloads.make_config("llama_train", "tiny", {"parallelism": "pp", "stages": "2",
                                                        "microbatches": "8"})
    with pytest.raises(WorkloadError, match=r"B/M=1 sequences a microbatch, not divisible by "
                                            r"the 2 devices of the batch axes Y; valid "
                                            r"microbatches: 1, 2, 4 \(or a larger --set B\)"):
        pipeline.check_mesh(cfg, abstract_mesh("2x2"))


# --- compiled for a TPU slice by libtpu (splash in the stage loop, the embedding's gather) -----
@pytest.mark.slow   # one small pipelined compile by libtpu: about a minute on a shared host
@pytest.mark.libtpu
def test_a_pipeline_with_data_and_tensor_parallelism_compiles_for_tpu():
    # 2 stages x 2 replicas x 2-way TP on a v5p 2x2x2 slice, T = 256 so splash attention runs
    # inside the stage loop (its shard_map nested in the stage's); libtpu once refused it ("the
    # context mesh ... should match the mesh passed to shard_map") and then the embedding's
    # gather ("Slice dim size 64 greater than dynamic slice dimension: 32": D over 2-way TP)
    from harness.hlo import executed, parse_module
    from workloads.aot import compile_in_subprocess

    aot = compile_in_subprocess("llama_train", "tiny_pp", {
        "parallelism": "pp+dp_tp", "stages": "2", "microbatches": "2", "B": "8", "T": "256",
        "H": "128", "schedule": "gpipe"}, "stage=2,data=2,model=2", tpu_chip="tpu-v5p")
    module = parse_module(aot.hlo_text)
    ran = [i for i, _ in executed(module)]
    assert "splash_mha_fwd_residuals" in {i.name.split(".")[0] for i in ran}
    assert any(i.opcode.startswith("collective-permute") for i in ran)   # the stage hand-off


def test_a_failed_compile_reports_the_error_line_not_the_last_line():
    from workloads.aot import failure_line

    # a child's traceback as jax 0.10 prints it: the exception, its message's continuation,
    # then where in our code it came from
    output = "\n".join([
        "Traceback (most recent call last):",
        '  File "/work/main/workloads/aot.py", line 71, in compile_here',
        "    compiled = lowered.compile()",
        "jax.errors.JaxRuntimeError: INVALID_ARGUMENT: during context [post-layout]: Slice "
        "dim size 64 greater than dynamic slice dimension: 32.",
        "\t, for instruction %dynamic-slice.4998 = bf16[2,256,64] dynamic-slice(...)",
        "Suspected Python Code Location:",
        "  /work/main/workloads/llama/model.py:124:11 [embed]", ""])
    assert failure_line(output).startswith("jax.errors.JaxRuntimeError: INVALID_ARGUMENT")
    assert failure_line("ValueError: a\nValueError: b\n  trailing") == "ValueError: b"
    assert failure_line("killed\n") == "killed" and failure_line("") == "no output"
