"""The MoE workload (issue 54 part 1; workloads/llama/moe*.py) on 8 virtual CPU devices.

Expected numbers are arithmetic from the config (book letters, reference §5.4) or the unsharded
step's own values compared with the sharded step's; none is the code's output pasted back.
"""
import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workloads
from predictions import transformer
from workloads.base import WorkloadError
from workloads.llama import book, model, moe, moe_gmm, moe_presets, moe_step, serve, train
from workloads.llama.config import Dims, book_model
from workloads.llama.sharding import Sharder
from workloads.mesh import abstract_mesh, lower_abstract, make_mesh

# one layer, fp32: a sharded step equals the unsharded one to rounding
SMALL = dict(L=1, param_dtype="float32")


def _cfg(**kw) -> train.TrainConfig:
    return dataclasses.replace(train.PRESETS["tiny_moe"], **{**SMALL, **kw})


def _two_steps(cfg, mesh):
    """The first step's loss (initial params), the second's, and the first's routing."""
    fn, args = train.build(cfg, mesh)
    out = fn(*args)
    second = fn(out[0], out[1], *args[2:])
    return float(out[2]), float(second[2]), moe_step.routing_of(out)


def test_a_tiny_moe_trains_on_an_expert_axis_of_8():
    """The quick one (the full matrix against the unsharded step is ``slow``: five compiles
    of a train step, half a minute each on a loaded 2-core host)."""
    cfg = _cfg(parallelism="ep")
    loss1, loss2, routing = _two_steps(cfg, make_mesh("expert=8"))
    assert np.isfinite(loss1) and loss2 < loss1
    # every token-choice counted once: B·T·k per layer; dropless drops none
    assert routing["tokens_per_expert_LE"].sum(axis=1).tolist() == [cfg.B * cfg.T * cfg.k]
    assert routing["dropped_L"].tolist() == [0]
    # the balance loss E·sum_e f_e·P_e: 1 for a router uniform in f and P, positive always
    assert routing["balance_loss_L"][0] > 0


@pytest.fixture(scope="module")
def reference():
    """The unsharded dropless step: what every layout and experts_impl must reproduce."""
    return _two_steps(_cfg(), None)


# (experts_impl, its capacity factor, mesh, layout): an expert axis of 8 and of 4, dropless
# both ways and with a capacity; factor 4 gives C = ceil(4·n·k/E) = n (k = 2, E = 8), room for
# every token-choice of a group, so the capacity step drops none and equals the dropless one
CASES = [
    ("ragged", 0.0, "expert=8", "ep"),
    ("tiled", 0.0, "expert=4,data=2", "dp_ep"),
    ("capacity", 4.0, "expert=4,data=2", "dp_ep"),
    ("ragged", 0.0, "expert=2,fsdp=2,model=2", "ep+fsdp_tp"),
]


@pytest.mark.slow
@pytest.mark.parametrize("impl, factor, mesh, layout", CASES)
def test_a_tiny_moe_trains_sharded_as_unsharded(reference, impl, factor, mesh, layout):
    cfg = _cfg(experts_impl=impl, capacity_factor=factor, parallelism=layout)
    loss1, loss2, routing = _two_steps(cfg, make_mesh(mesh))
    ref1, ref2, ref_routing = reference
    assert loss1 == pytest.approx(ref1, rel=1e-5)
    assert loss2 == pytest.approx(ref2, rel=1e-4)   # the gradients agree: AdamW moved alike
    assert loss2 < loss1
    np.testing.assert_array_equal(routing["tokens_per_expert_LE"],
                                  ref_routing["tokens_per_expert_LE"])
    # every token-choice counted once: B·T·k per layer; none dropped
    assert routing["tokens_per_expert_LE"].sum(axis=1).tolist() == [cfg.B * cfg.T * cfg.k]
    assert routing["dropped_L"].tolist() == [0]


def _layer(d: Dims, mesh=None, layout="ep"):
    """One MoE layer, jitted, on ``mesh``: f(h [B, T, D]) -> (y, routing); its weights."""
    params = model.init_params(dataclasses.replace(d, L=1), 0, "float32")
    w = {k: v[0] for k, v in params["layers"].items()}
    sh = Sharder(mesh, layout, d)
    return jax.jit(lambda h, w_: moe.moe_mlp(h, w_, d, sh)), w


B, T = 8, 16   # 128 tokens


def _h(D=64):
    return jnp.asarray(np.random.default_rng(1).standard_normal((B, T, D)), jnp.float32)


def test_a_router_biased_to_expert_0_concentrates_and_drops_past_capacity():
    # k = 1 and a bias of 1e4 on expert 0's logit: every token picks expert 0; on 8 expert
    # devices each group is n = 128/8 = 16 tokens and C = ceil(1.0·16·1/8) = 2, so each group
    # drops 16 - 2 = 14 token-choices: 8·14 = 112 of 128
    d = Dims(F=64, E=8, k=1, experts_impl="capacity", capacity_factor=1.0, router_bias=1e4)
    f, w = _layer(d, make_mesh("expert=8"))
    _, routing = f(_h(), w)
    assert np.asarray(routing["tokens_per_expert_E"]).tolist() == [128, 0, 0, 0, 0, 0, 0, 0]
    n, groups = B * T // 8, 8
    assert moe.capacity(d, n) == 2
    assert int(routing["dropped"]) == groups * (n - 2) == 112
    # the tiled loop on expert 0's device would run ceil(128 / 8) = 16 tiles, the others none
    assert moe_gmm.trips([128], d.expert_tile) == 16 and moe_gmm.trips([0] * 7, 8) == 0


def test_capacity_with_a_big_factor_equals_dropless():
    d = Dims(F=64, E=8, k=2)
    f, w = _layer(d)
    g, _ = _layer(dataclasses.replace(d, experts_impl="capacity", capacity_factor=4.0))
    (y, r), (y_cap, r_cap) = f(_h(), w), g(_h(), w)
    np.testing.assert_allclose(y_cap, y, rtol=1e-5, atol=1e-5)
    assert int(r_cap["dropped"]) == 0
    np.testing.assert_array_equal(r_cap["tokens_per_expert_E"], r["tokens_per_expert_E"])


def _flops(d: Dims) -> float:
    f, w = _layer(d)
    return f.lower(_h(), w).compile().cost_analysis()["flops"]


def test_routed_flops_against_what_each_path_compiled():
    D = F = 64
    E, k, n = 8, 2, B * T
    routed = 2 * n * k * D * F * 3          # forward, gated MLP: 3 matrices (§5.4)
    router = 2 * n * D * E
    # ragged_dot on CPU (jax 0.10.2): one dense dot of every row against every expert, E times
    # the routed FLOPs; the rest (< 2%) is elementwise: each matmul's rows masked per expert
    # into [n·k, E·D] (3·256·512 selects), the softmax, silu·u
    ragged = _flops(Dims(F=F, E=E, k=k))
    assert E * routed + router <= ragged <= 1.02 * (E * routed + router)
    # capacity 1.0: E buffers of C = n·k/E rows, E·C = n·k, so the einsums are the routed FLOPs
    capacity = _flops(Dims(F=F, E=E, k=k, experts_impl="capacity", capacity_factor=1.0))
    assert routed + router <= capacity <= 1.05 * (routed + router)
    # tiled: cost_analysis counts a while body once, one tile of each matrix (2·tile·D·F), not
    # the trips the routing makes; two tile sizes differ by those tiles' FLOPs, 3·2·8·D·F
    # (plus the masking of 8 more rows, under 2%)
    t8 = _flops(Dims(F=F, E=E, k=k, experts_impl="tiled", expert_tile=8))
    t16 = _flops(Dims(F=F, E=E, k=k, experts_impl="tiled", expert_tile=16))
    assert 3 * 2 * 8 * D * F <= t16 - t8 <= 1.02 * 3 * 2 * 8 * D * F
    assert t8 < routed   # what the loop runs is trips · 3·2·tile·D·F, below
    # the trips the loop makes for group sizes g: sum ceil(g / tile); with each g a multiple of
    # the tile it runs exactly the routed rows n·k
    assert moe_gmm.trips([32] * 8, 8) * 8 == n * k


def _all_to_all_bytes(hlo: str) -> list[int]:
    """Bytes of each all-to-all in compiled HLO: the sum of its result tuple's arrays."""
    sizes = {"f32": 4, "bf16": 2, "s32": 4}
    out = []
    for line in hlo.splitlines():
        if " all-to-all(" not in line:
            continue
        result = line.split("=", 1)[1].split("all-to-all(")[0]
        out.append(sum(sizes[t] * math.prod(int(x) for x in dims.split(",") if x)
                       for t, dims in re.findall(r"(f32|bf16|s32)\[([\d,]*)\]", result)))
    return out


def test_all_to_all_bytes_follow_the_shapes():
    mesh = make_mesh("expert=4,data=2")    # Z = 4 expert devices, 2 experts each
    n, D, E, k, Z = B * T // 8, 64, 8, 2, 4  # n = 16 tokens a device
    d = Dims(F=64, E=E, k=k, experts_impl="capacity", capacity_factor=1.0)
    f, w = _layer(d, mesh, "dp_ep")
    C = math.ceil(1.0 * n * k / E)
    # dispatch and combine: each device's [E, C, D] buffer, fp32
    assert _all_to_all_bytes(f.lower(_h(), w).compile().as_text()) == [E * C * D * 4] * 2
    # dropless: per destination a buffer padded to n·min(k, E/Z) rows, and the group sizes
    f, w = _layer(dataclasses.replace(d, experts_impl="ragged", capacity_factor=0.0), mesh,
                  "dp_ep")
    padded = Z * n * min(k, E // Z) * D * 4
    assert sorted(_all_to_all_bytes(f.lower(_h(), w).compile().as_text())) == sorted(
        [padded, padded, Z * (E // Z) * 4])
    # on TPU/GPU ragged_all_to_all would send the token-choices only: n·k·D·4 bytes each way
    assert padded == Z * n * k * D * 4 == 4 * (n * k * D * 4)


def test_moe_params_active_and_total_by_hand():
    c = moe_presets.MOE_DIMS["mixtral_8x7b"]
    L, D, F, N, K, H, V, E, k = (c.L, c.D, c.F, c.N, c.K, c.H, c.V, c.E, c.k)
    attention, norms = 2 * D * (N + K) * H, 2 * D
    total = L * (attention + norms + E * 3 * D * F + D * E) + D + 2 * D * V
    active = L * (attention + norms + k * 3 * D * F + D * E) + D + 2 * D * V
    assert book.moe_params(c) == (total, active)
    assert model.count_params(model.abstract_params(c)) == total
    # Mixtral 8x7B as published: 46.7B parameters, 12.9B active
    assert total == pytest.approx(46.7e9, rel=0.002) and active == pytest.approx(12.9e9, rel=0.01)


def test_book_prices_a_moe_step_by_its_active_parameters():
    cfg = train.PRESETS["tiny_moe"]
    L, D, F, N, K, H, V, E, k = (cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V, cfg.E, cfg.k)
    tokens = cfg.B * cfg.T
    # MaxText's MFU numerator: matmul parameters a token meets (no embedding, no norms)
    P_matmul = L * (k * 3 * D * F + D * E + 2 * D * (N + K) * H) + D * V
    attention = transformer.attention_flops(book_model(cfg), tokens, cfg.T, training=True)
    est = book.train(cfg, make_mesh("expert=8"), "tpu-v5p")
    assert est.model_flops == pytest.approx(6 * P_matmul * tokens + attention)
    # the book's 6·P_active·tokens (§6.4): every active parameter, embedding and norms too
    _, active = book.moe_params(cfg)
    assert est.book_flops == pytest.approx(6 * active * tokens + attention)


def test_bad_moe_configs_name_the_valid_choices():
    with pytest.raises(WorkloadError, match=r"k=9 .* E=8 .*1 <= k <= E"):
        workloads.make_config("llama_train", "tiny_moe", {"k": "9"})
    with pytest.raises(WorkloadError, match="valid: capacity, ragged, tiled"):
        workloads.make_config("llama_train", "tiny_moe", {"experts_impl": "megablox"})
    with pytest.raises(WorkloadError, match="> 0 with capacity"):
        workloads.make_config("llama_train", "tiny_moe", {"experts_impl": "capacity"})
    with pytest.raises(WorkloadError, match="E=6 experts are not divisible by 4 expert"):
        Sharder(abstract_mesh("expert=4,data=2"), "dp_ep", Dims(E=6, k=2))
    with pytest.raises(WorkloadError, match="pipelined or accumulated MoE step is not built"):
        workloads.make_config("llama_train", "tiny_moe", {"microbatches": "2"})


@pytest.mark.slow   # two compiles of a whole model, ~30 s on a loaded host
def test_prefill_and_decode_run_with_experts():
    cfg = serve.PRESETS["tiny_moe"]
    mesh = make_mesh("expert=8")
    fn, args = serve.build_prefill(cfg, mesh)
    logits, _, routing = fn(*args)
    assert logits.shape == (cfg.B, cfg.V) and bool(jnp.all(jnp.isfinite(logits)))
    # prefill routes all B·T prompt tokens, k experts each, in every layer
    assert routing["tokens_per_expert_LE"].sum(axis=1).tolist() == [cfg.B * cfg.T * cfg.k] * 2
    fn, args = serve.build_decode(cfg, mesh)
    logits, _, routing = fn(*args)
    assert routing["tokens_per_expert_LE"].sum(axis=1).tolist() == [cfg.B * cfg.k] * 2


@pytest.mark.parametrize("name", moe_presets.PUBLISHED)
def test_published_presets_lower_ahead_of_time(name):
    cfg = train.PRESETS[name]
    fn, args = train.build(cfg, abstract_mesh("expert=8,fsdp=8"), abstract=True)
    total, _ = book.moe_params(cfg)
    assert model.count_params(args[0]) == total
    assert "all_to_all" in lower_abstract(fn, args).as_text()


def test_the_tiled_loop_and_its_backward_equal_ragged_dot():
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((40, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((4, 16, 8)), jnp.float32)
    sizes = jnp.asarray([5, 0, 17, 10], jnp.int32)   # 32 rows in groups, 8 rows of padding

    def loss(gmm):
        return lambda x_, w_: jnp.sum(jnp.sin(gmm(x_, w_, sizes, 4)))

    ragged, tiled = (jax.jit(jax.value_and_grad(loss(g), argnums=(0, 1)))
                     for g in (moe_gmm.ragged, moe_gmm.tiled))
    (v_r, (dx_r, dw_r)), (v_t, (dx_t, dw_t)) = ragged(x, w), tiled(x, w)
    assert float(v_t) == pytest.approx(float(v_r), rel=1e-5)
    np.testing.assert_allclose(dx_t, dx_r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw_t, dw_r, rtol=1e-4, atol=1e-4)
    assert moe_gmm.trips([5, 0, 17, 10], 4) == 2 + 0 + 5 + 3


def test_the_expert_role_and_its_layouts_are_in_the_one_registry():
    from predictions import layouts

    assert "expert" in layouts.ROLES
    assert layouts.for_roles(["expert", "data"]).name == "dp_ep"
    assert layouts.for_roles(["expert", "fsdp", "model"]).name == "ep+fsdp_tp"
    entry = layouts.layout("ep+fsdp_tp")
    shape = {"expert": 2, "fsdp": 2, "model": 2}
    assert layouts.expert_axes(entry, shape) == ("expert",)
    assert layouts.split(entry, shape) == {"batch": ("expert", "fsdp"), "weights": ("fsdp",),
                                           "model": ("model",)}
    # the expert axis splits the batch: X counts it beside data and FSDP
    assert layouts.degrees(entry, shape) == (4, 2)


def test_memory_shards_the_experts_over_the_expert_axis():
    from workloads.llama import memory

    cfg = train.PRESETS["mixtral_8x7b"]      # ep+fsdp
    total, _ = book.moe_params(cfg)
    experts = cfg.L * cfg.E * 3 * cfg.D * cfg.F
    need = memory.train_bytes(cfg, abstract_mesh("expert=8,fsdp=8"))
    # bf16: the dense weights over the 8 FSDP devices, the experts over all 64 (E_Z, D_X)
    assert need["parameters"] == pytest.approx(2 * ((total - experts) / 8 + experts / 64))
    assert need["optimizer"] == pytest.approx(4 * need["parameters"])   # two fp32 moments
