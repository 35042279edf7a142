"""``llama_generate``: the request loop's counts from arithmetic, its greedy tokens against a
plain prefill + decode of the same request, int8 weights and KV, bad options, the loop captured
whole as ``harness run`` captures it (its programs' executions in the trace from arithmetic,
the time between executions), the report's section. One tiny model on one device, its three
programs compiled once for the module."""
import dataclasses
import math

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

import workloads
from harness import schema
from harness.chip import drift
from harness.cli import main
from harness.report import serving_loop
from harness.runs.loop import numbered, run_loop
from harness.runs.workload import Built, build_workload
from workloads.llama import generate, generate_loop, serve

# L=1 layer, B=2 slots, prompts padded to T=8, S=32 cache slots; float32 so that the two paths
# (scatter per slot vs a uniform position) agree to the last bit of the argmax
SETS = {"L": "1", "B": "2", "T": "8", "S": "32", "dtype": "float32"}


def config(**more) -> generate.GenerateConfig:
    return workloads.make_config("llama_generate", "tiny", {**SETS, **more})


@pytest.fixture(scope="module")
def progs():
    return generate.programs(config(), None)


def stream(progs, **more):
    cfg = config(**more)
    prefix, reqs = generate_loop.requests(cfg)
    return cfg, reqs, generate_loop.run_stream(cfg, progs, prefix, reqs)


def test_counts_from_arithmetic(progs):
    """R = 5 requests of g = 3 tokens through B = 2 slots, all arriving at once: 15 tokens out;
    each request's first token comes from its prefill and 2 more from generate steps, in three
    waves (2, 2, 1 requests) of 2 steps: 6 steps carrying 5 * 2 = 10 slot-tokens, occupancy
    10 / (6 * 2); every request shares the prefix: 5 hits."""
    cfg, reqs, s = stream(progs, R="5", g_min="3", g_max="3", shared="1.0")
    fig = generate_loop.figures(cfg, None, None, s)
    assert fig["tokens_out"] == 5 * 3
    assert fig["prefix_hits"] == 5
    assert fig["generate_steps"] == 3 * 2
    m = fig["measured"]
    assert m["occupancy_mean"] == pytest.approx(10 / 12)
    assert (m["occupancy_min"], m["occupancy_max"]) == (0.5, 1.0)
    assert 0 < m["ttft_median_s"] <= m["ttft_p90_s"]
    assert m["tokens_per_s"] == pytest.approx(15 / s.wall_s)
    assert [len(x.tokens) for x in s.served] == [3] * 5


def test_no_prefix_no_hits_and_drawn_lengths(progs):
    cfg, reqs, s = stream(progs, R="4", shared="0.0", g_min="1", g_max="4", p_min="3",
                          p_max="5", seed="7")
    assert s.prefix_hits == 0
    assert all(3 <= len(r.prompt) <= 5 and 1 <= r.g <= 4 for r in reqs)
    assert sum(len(x.tokens) for x in s.served) == sum(r.g for r in reqs)
    assert generate_loop.requests(cfg)[1][2].prompt.tolist() == reqs[2].prompt.tolist()


def test_poisson_arrivals_are_seeded_and_ordered():
    cfg = config(R="50", rate="100")
    a = [r.arrival_s for r in generate_loop.requests(cfg)[1]]
    assert a[0] == 0 and a == sorted(a)
    # 49 exponential gaps of mean 1/100 s: their mean is within 4 standard errors of 0.01
    assert abs(np.mean(np.diff(a)) - 0.01) < 4 * 0.01 / math.sqrt(49)
    assert a == [r.arrival_s for r in generate_loop.requests(cfg)[1]]


def _reference(cfg, T: int):
    """Greedy tokens of one request of T prompt tokens by llama_prefill then llama_decode
    (B = 1, the whole prompt at once, a uniform decode position): the plain path, no slots, no
    prefix cache. Compiled once; returns ``tokens(prompt, g)``."""
    one = dataclasses.replace(serve.ServeConfig(**{
        f.name: getattr(cfg, f.name) for f in dataclasses.fields(serve.ServeConfig)}), B=1, T=T)
    prefill, (params, _) = serve.build_prefill(one, None)
    decode, _ = serve.build_decode(one, None)

    def tokens(prompt: np.ndarray, g: int) -> list[int]:
        logits, cache = prefill(params, prompt[None].astype(np.int32))
        out = [int(np.argmax(logits[0]))]
        for i in range(g - 1):
            logits, cache = decode(params, cache, np.array([[out[-1]]], np.int32),
                                   np.int32(T + i))
            out.append(int(np.argmax(logits[0])))
        return out

    return tokens


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_greedy_tokens_equal_plain_prefill_and_decode(progs):
    """Three requests through two slots (one waits for a slot), the prefix cached: each one's
    tokens equal a plain prefill of prefix + prompt followed by decode steps."""
    cfg, reqs, s = stream(progs, R="3", g_min="4", g_max="4", p_min="5", p_max="5",
                          shared="1.0")
    prefix, _ = generate_loop.requests(cfg)
    plain = _reference(cfg, len(prefix) + 5)
    for r, got in zip(reqs, s.served):
        assert got.tokens == plain(np.concatenate([prefix, r.prompt]), r.g)


def test_eight_model_devices_serve_the_tokens_of_one_each_caching_1_over_K():
    """On 1x8 (dp_tp, Y = 8 model devices > K = 4 KV heads) the slots' cache stores each head
    twice, split over the 8 (§7.4: heads K-way, replicated beyond): each device holds one head,
    [L, B, 1, S, H], 1/K of the cache; the tokens served equal one device's."""
    from workloads.mesh import make_mesh

    cfg = config(R="3", g_min="3", g_max="3")
    prefix, reqs = generate_loop.requests(cfg)
    one = generate_loop.run_stream(cfg, generate.programs(cfg, None), prefix, reqs)
    mesh = make_mesh("1x8", workloads.get("llama_generate").mesh_axes)
    progs8 = generate.programs(cfg, mesh)
    eight = generate_loop.run_stream(cfg, progs8, prefix, reqs)
    assert [x.tokens for x in eight.served] == [x.tokens for x in one.served]
    k = progs8.cache_B["k_LBKSH"]
    assert k.shape == (cfg.L, cfg.B, 2 * cfg.K, cfg.S, cfg.H)
    assert {s.data.shape for s in k.addressable_shards} == {(cfg.L, cfg.B, 1, cfg.S, cfg.H)}


def test_int8_weights_and_kv_serve():
    cfg = config(int8_weights="true", int8_kv="true", R="3", g_min="2", g_max="2")
    progs8 = generate.programs(cfg, None)
    prefix, reqs = generate_loop.requests(cfg)
    s = generate_loop.run_stream(cfg, progs8, prefix, reqs)
    assert sum(len(x.tokens) for x in s.served) == 3 * 2
    assert all(0 <= t < cfg.V for x in s.served for t in x.tokens)
    assert progs8.cache_B["k_LBKSH"].dtype == np.int8


def test_prediction_on_a_named_chip():
    """The book's decode step at B slots over S cached tokens on one H100, by hand: weights
    (2 bytes each) and every slot's KV read once from HBM (inference.md §7.3)."""
    from predictions import hardware, transformer
    from workloads.llama.config import book_model

    cfg = config()
    p = generate_loop.predicted(cfg, None, "h100")
    c, model = hardware.chip_entry("h100"), book_model(cfg)
    kv = cfg.B * transformer.kv_cache_bytes(model, cfg.S, 2)
    weights = transformer.param_count(model) * 2
    flops = 2 * transformer.param_count(model) * cfg.B / c.flops_per_s("f32")
    assert p["tpot_s"] == pytest.approx(kv / c.hbm_bytes_per_s
                                        + max(weights / c.hbm_bytes_per_s, flops))
    assert p["tokens_per_s"] == pytest.approx(cfg.B / p["tpot_s"])


@pytest.mark.parametrize("sets, says", [
    (["p_max=9"], "p_max <= T=8"),
    (["shared=1.5"], "[0, 1]"),
    (["prefix=30"], "S=32"),
    (["rate=-1"], "rate"),
])
def test_bad_options_one_line_rc2(capsys, sets, says):
    argv = ["run", "llama_generate", *[a for s in sets for a in ("--set", s)],
            "--set", "T=8", "--set", "S=32"]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert says in err and "\n" not in err and "Traceback" not in err


class _Run:
    def __init__(self, meta):
        self.meta = meta


def test_report_section_shows_measured_beside_predicted():
    fig = {"requests": 4, "slots": 2, "tokens_out": 12, "prefix_hits": 2, "generate_steps": 5,
           "wall_s": 0.5, "notes": ["host-bound"],
           "measured": {"ttft_median_s": 0.02, "ttft_p90_s": 0.03, "tpot_median_s": 0.01,
                        "tpot_p90_s": 0.012, "tokens_per_s": 24.0, "occupancy_mean": 0.8,
                        "occupancy_min": 0.5, "occupancy_max": 1.0},
           "predicted": {"chip": "h100", "ttft_s": 1e-4, "tpot_s": 2e-5, "tokens_per_s": 1e5}}
    text = "\n".join(serving_loop.lines(_Run({serving_loop.LOOP: fig})))
    assert "4 requests through 2 slots, 12 tokens out" in text
    assert "2 prefix-cache hits; predicted on h100" in text
    row = next(line for line in text.splitlines() if "time per output token, median" in line)
    assert "10 ms" in row and "20 us" in row
    assert "note: host-bound" in text
    assert serving_loop.lines(_Run({})) == []


def _captured(tmp_path, one: bool, **more):
    """``run_loop`` of the tiny preset's stream (``more`` set) on a 1x1 mesh (``one``) or on
    every device, predicted on an H100 (no calibration here). Its bf16 programs: XLA:CPU runs
    a small enough one (``SETS``' f32 insert) on the calling thread, with no device ops traced."""
    if one:
        mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("X", "Y"))
        cfg = workloads.make_config("llama_generate", "tiny", more)
        built = Built(generate.WORKLOAD, cfg, mesh, None, ())
    else:
        built = build_workload("llama_generate", "tiny", more)
    return built, run_loop(built, preset="tiny", overrides=more, out_dir=tmp_path / "trace",
                           chip="h100")


def test_the_captured_stream_holds_the_three_programs(tmp_path):
    """R = 5 requests of g = 3 tokens through the preset's B = 4 slots, all sharing its 4-token
    prefix (T = 8): the trace holds ceil(4 / 8) + 5 prefills, 5 inserts and 2 waves (4
    requests, then 1) x 2 generate steps; the report is of generate, the loop's figures are the
    same stream's."""
    built, run = _captured(tmp_path, True, L="1", R="5", g_min="3", g_max="3", shared="1.0")
    d = run.meta[serving_loop.LOOP]
    runs = dict(zip(run.programs[schema.PROGRAM], run.programs[schema.EXECUTIONS]))
    assert runs == {"jit_prefill": 1 + 5, "jit_insert": 5, "jit_generate": 2 * 2}
    assert runs == d["calls"] == {k: v[schema.EXECUTIONS] for k, v in d["programs"].items()}
    assert (d["tokens_out"], d["prefix_hits"], d["generate_steps"]) == (5 * 3, 5, 2 * 2)
    assert run.meta[schema.PROGRAM] == "jit_generate" and run.step[schema.STEPS] == 4
    assert run.meta[schema.WORKLOAD] == "llama_generate" and run.meta[schema.DEVICE_COUNT] == 1
    # the host's speed probed before and after the stream, as a one-program run's is: both
    # sides' repeats kept, the best of each, which harness compare reads
    probed = run.meta[drift.HOST_DRIFT]
    assert [len(r) for r in probed[drift.RATES]] == [drift.REPEATS] * 2
    assert probed[drift.REFERENCE] == [max(r) for r in probed[drift.RATES]]
    b = d["between"]
    assert b["executions"] == 6 + 5 + 4
    assert 0 < b[schema.WAITING_S] < b[schema.PERIOD_S]
    assert b["host_s"] == pytest.approx(sum(b[c] for c in (
        schema.WAIT_DISPATCH_S, schema.WAIT_PYTHON_S, schema.WAIT_INPUT_S, schema.WAIT_HOST_S)))
    # the stream's span but for its waits is the device's op time over every execution of
    # every program (one device; its ops do not overlap)
    busy = sum(v[schema.TOTAL_S] for v in d["programs"].values())
    assert b[schema.PERIOD_S] - b[schema.WAITING_S] == pytest.approx(busy, rel=0.05)
    text = "\n".join(serving_loop.lines(run))
    assert "captured: jit_prefill 6 executions (6 calls)" in text
    assert "jit_generate 4 executions (4 calls)" in text
    assert "between executions: of the stream's" in text
    ops, other = b[schema.PERIOD_S] - b[schema.WAITING_S], b[schema.WAITING_S] - b["host_s"]
    said = {"host-bound:": b["host_s"], "device-bound:": ops, "bound by the devices'": other}
    assert f"\n  {max(said, key=said.get)} " in text


@pytest.mark.slow  # the three programs compiled for 8 devices: over 12 s on a 2-core host
def test_the_captured_stream_on_eight_devices(tmp_path):
    """The preset's stream on 4x2: ceil(prefix / T) + R prefills, an insert a request of g >= 2,
    generate as often as the loop stepped."""
    cfg = workloads.make_config("llama_generate", "tiny", {})
    built, run = _captured(tmp_path, False)
    assert dict(built.mesh.shape) == {"X": 4, "Y": 2} and run.meta[schema.DEVICE_COUNT] == 8
    d = run.meta[serving_loop.LOOP]
    runs = dict(zip(run.programs[schema.PROGRAM], run.programs[schema.EXECUTIONS]))
    prefix, reqs = generate_loop.requests(cfg)
    assert runs == {"jit_prefill": -(-len(prefix) // cfg.T) + len(reqs),
                    "jit_insert": sum(r.g >= 2 for r in reqs),
                    "jit_generate": d["generate_steps"]} == d["calls"]
    assert d["tokens_out"] == sum(r.g for r in reqs)
    assert d["prefix_hits"] == sum(r.shared for r in reqs)
    assert d["between"]["executions"] == sum(runs.values())


def test_executions_numbered_in_the_order_they_started():
    """Two programs, interleaved a, b, a on 2 devices (a: ops x then y; b: op z): the waits
    read each execution as a step, numbered by start."""
    import pandas as pd

    rows = []
    for dev in (0, 1):
        for prog, ops, t0 in (("a", "xy", 0), ("b", "z", 100), ("a", "xy", 200)):
            rows += [(prog, op, dev, t0 + 10 * i + dev) for i, op in enumerate(ops)]
    ev = pd.DataFrame(rows, columns=[schema.PROGRAM, schema.OP, schema.DEVICE,
                                     schema.START_NS]).assign(**{
        schema.PROGRAM_ID: "", schema.STEP: 0, schema.DURATION_NS: 5})
    got = numbered(ev, {"a": 2, "b": 1}).sort_values([schema.DEVICE, schema.START_NS])
    assert got[schema.STEP].tolist() == [0, 0, 1, 2, 2] * 2


def _between(period, ops, dispatch, python) -> dict:
    host = dispatch + python
    return {schema.PERIOD_S: period, schema.WAITING_S: period - ops, "executions": 10,
            schema.WAIT_DISPATCH_S: dispatch, schema.WAIT_PYTHON_S: python,
            schema.WAIT_UNEXPLAINED_S: period - ops - host, "host_s": host}


@pytest.mark.parametrize("between, says", [
    # 70 of 100 ms waiting for the host, 25 running ops: host-bound, the shares from the figures
    (_between(0.1, 0.025, 0.05, 0.02), "host-bound: the devices waited for the host 70% of "
                                       "the stream and ran ops 25%"),
    (_between(0.1, 0.08, 0.01, 0.005), "device-bound: the devices ran ops 80% of the stream "
                                       "and waited for the host 15%"),
    # 30 ms ops, 20 ms host, 50 ms unexplained: the devices' own waits
    (_between(0.1, 0.03, 0.01, 0.01), "bound by the devices' own waits: 50% of the stream "
                                      "(unexplained the most), against ops 30% and the host 20%"),
])
def test_the_verdict_comes_from_the_shares(between, says):
    lines = serving_loop.between_lines({"between": between})
    assert lines[0].startswith("between executions: of the stream's 100 ms over 10 executions")
    assert ": dispatch " in lines[0]
    assert lines[1] == says or lines[1].startswith(says + ":")
    assert serving_loop.between_lines({}) == []


@pytest.mark.slow  # a whole run in a process of its own (compile, capture, report): ~30 s
def test_harness_devices_1_run_prints_the_loop(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "harness", "--devices", "1", "run",
                           "llama_generate", "--chip", "h100", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "llama_generate (tiny) on mesh 1x1, 1x cpu" in out
    assert "serving loop: 8 requests through 4 slots" in out
    assert "captured: jit_prefill" in out and "between executions" in out
    said = ("  host-bound: ", "  device-bound: ", "  bound by the devices' own waits: ")
    assert sum(v in out for v in said) == 1


class _Made(Exception):
    """Stops ``run_loop`` once it has made its loop (the capture is not what is tested)."""


def test_the_loop_serves_on_the_params_build_placed(tmp_path):
    """``harness run``'s path (the workload's ``build``, as ``build_workload`` calls it, then
    ``run_loop``) on one device: the loop ``run_loop`` makes warms its programs on the very
    params and B slots' cache ``build`` placed, not a second copy of them."""
    loops = []

    def spy(cfg, mesh, args=None):
        loops.append(generate.StreamLoop(cfg, mesh, args))
        raise _Made

    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("X", "Y"))
    cfg = workloads.make_config("llama_generate", "tiny", {"L": "1"})
    built = Built(dataclasses.replace(generate.WORKLOAD, loop=spy), cfg, mesh,
                  *generate.build(cfg, mesh))
    params, cache_B = built.args[:2]
    with pytest.raises(_Made):
        run_loop(built, preset="tiny", overrides={}, out_dir=tmp_path / "trace")
    loops[0].warm()
    progs = loops[0].progs
    assert progs.params is params and progs.cache_B is cache_B
    pointers = lambda tree: [a.unsafe_buffer_pointer() for a in jax.tree.leaves(tree)]  # noqa: E731
    assert pointers(progs.params) == pointers(params)
    # the warm-up copies the slots' cache before generate donates it: build's is still whole
    assert not any(a.is_deleted() for a in jax.tree.leaves(built.args))


@pytest.mark.libtpu
def test_the_three_programs_compile_ahead_of_time_for_a_tpu_slice():
    """prefill, insert and generate lowered from their shapes on a v5e 2x4 slice (mesh 2x4) and
    compiled by XLA:TPU; insert and generate alias the B slots' cache they write (donated: a
    chip holds its share once, at least the whole cache over the 8 chips)."""
    import jax

    from workloads.llama.generate import programs
    from workloads.tpu import topology_mesh

    cfg = workloads.make_config("llama_generate", "tiny", {})
    mesh, _ = topology_mesh("tpu-v5e", "2x4", workloads.get("llama_generate").mesh_axes)
    progs = programs(cfg, mesh, abstract=True)
    tok1 = jax.ShapeDtypeStruct((1, cfg.T), np.int32)
    one = jax.ShapeDtypeStruct((), np.int32)
    tokB = jax.ShapeDtypeStruct((cfg.B, 1), np.int32)
    posB = jax.ShapeDtypeStruct((cfg.B,), np.int32)
    compiled = {
        "prefill": progs.prefill.lower(progs.params, progs.empty1, tok1, one, one).compile(),
        "insert": progs.insert.lower(progs.cache_B, progs.empty1, one).compile(),
        "generate": progs.generate.lower(progs.params, progs.cache_B, tokB, posB).compile()}
    cache_B = sum(int(np.prod(a.shape)) * a.dtype.itemsize
                  for a in jax.tree.leaves(progs.cache_B)) // 8     # over the 8 chips at most
    for name in ("insert", "generate"):
        assert compiled[name].memory_analysis().alias_size_in_bytes >= cache_B, name
