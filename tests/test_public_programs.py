"""Issue 58 part 7: public JAX programs the project had no test of, written as JAX's and Flax's
documentation write them (tests/public_programs/), read by ``harness explain``, ``harness
profile`` and ``harness.analyze``: reasons, axes, bytes from the shapes (f32: 4 bytes), the
device count and names that map to the user's code.

- ``sharded_mlp_training``: the "Distributed arrays and automatic parallelization" tutorial's
  MLP training, data parallel over 8, then data + model parallel on a 4x2 mesh (Megatron's
  pair: W2 on its columns, W3 on its rows);
- ``shard_map_fsdp``: the shard_map tutorial's FSDP (a ``custom_vjp`` all_gather whose
  transpose is ``psum_scatter``);
- ``nnx_fsdp_tp``: a Flax NNX MLP under ``jax.set_mesh``, kernels W_in[D_data, F_model],
  W_out[F_model, D_data], AdamW (run end to end under ``harness profile``)."""
from pathlib import Path

import jax
import pytest
from profiling import env_for, harness, report_of
from public_programs import shard_map_fsdp as fsdp
from public_programs import sharded_mlp_training as mlp

from harness import schema
from harness.explain import collectives
from harness.hlo import parse_module

F32 = 4
PUBLIC = Path(__file__).parent / "public_programs"


def _table(fn, args, mesh):
    return collectives(parse_module(fn.lower(*args).compile().as_text()), mesh=mesh)


def _params(layers):
    """(n_in·n_out, n_out) elements of each (W, b)."""
    return [(i * o, o) for i, o in zip(layers[:-1], layers[1:])]


def _names(why: str) -> str:
    return why.split(":")[0]


@pytest.fixture(scope="module")
def init():
    return mlp.init(jax.random.key(0), mlp.LAYERS, mlp.B)


def test_data_parallel_training_sums_every_gradient_over_batch(init):
    table = _table(mlp.train_step, mlp.data_parallel(*init), {"batch": 8})
    (row,) = table.to_dict("records")
    assert (row[schema.COLLECTIVE], row[schema.MESH_AXES]) == ("all-reduce", "batch")
    assert row[schema.REASON] == "gradient reduction"
    assert row[schema.DEVICE_BYTES] == sum(w + b for w, b in _params(mlp.LAYERS)) * F32
    assert _names(row[schema.WHY]) == ("the weight gradients of params[0][0], params[0][1], "
                                       "params[1][0] and 5 more")
    assert "reduce-scatter the gradients" in row[schema.FIX]  # it does not yet


def test_model_parallel_training_reads_as_megatrons_pair_and_a_gradient_reduction(init):
    table = _table(mlp.train_step, mlp.model_parallel(*init), {"batch": 4, "model": 2})
    grads = table[table[schema.REASON] == "gradient reduction"]
    (g,) = grads.to_dict("records")
    assert g[schema.MESH_AXES] == "batch"
    # W2, b2, W3 are split over model=2 on each device; the rest whole
    (w1, b1), (w2, b2), (w3, b3), (w4, b4) = _params(mlp.LAYERS)
    assert g[schema.DEVICE_BYTES] == (w1 + b1 + w2 // 2 + b2 // 2 + w3 // 2 + b3 + w4 + b4) * F32
    tp = table[table[schema.MESH_AXES] == "model"]
    # the forward's row-parallel matmul (W3) and the backward's through W2's columns: partial
    # sums of [B/4, 256], case 3 both; no weight gradient, no Megatron advice (it is Megatron)
    assert len(tp) == 2 and set(tp[schema.REASON]) == {"case 3: partial sums"}
    assert set(tp[schema.DEVICE_BYTES]) == {mlp.B // 4 * mlp.LAYERS[2] * F32}
    assert not tp[schema.FIX].str.contains("Megatron").any()
    assert not tp[schema.WHY].str.contains("batch[", regex=False).any()  # no weight


def test_shard_map_fsdp_names_each_gathered_weight_and_its_gradient_once():
    params, batch = fsdp.init(jax.random.key(0), fsdp.LAYERS, fsdp.B)
    sharded = jax.sharding.NamedSharding(fsdp.mesh, jax.sharding.PartitionSpec("batch"))
    params, batch = jax.device_put((params, batch), sharded)
    table = _table(fsdp.train_step, (params, batch), {"batch": 8})
    assert set(table[schema.MESH_AXES]) == {"batch"}
    names = [f"params[{k}][{j}]" for k in range(len(fsdp.LAYERS) - 1) for j in (0, 1)]
    size = dict(zip(names, [n for wb in _params(fsdp.LAYERS) for n in wb]))
    gathers = table[table[schema.COLLECTIVE] == "all-gather"]
    weights = gathers[gathers[schema.REASON] == "FSDP weight gather"]
    # each weight gathered whole for its matmul (the bias for its add), its gradient
    # psum_scatter-ed back: one reduce-scatter of its whole size, named after it
    assert sorted(w.split()[2] for w in weights[schema.WHY]) == names[::2]
    for _, row in gathers.iterrows():
        name = next(n for n in names if n in row[schema.WHY])
        assert row[schema.DEVICE_BYTES] == size[name] * F32
    scatters = table[table[schema.COLLECTIVE] == "reduce-scatter"]
    assert set(scatters[schema.REASON]) == {"gradient reduction"}
    named = {_names(w).removeprefix("the weight gradients of "): b for w, b in
             zip(scatters[schema.WHY], scatters[schema.DEVICE_BYTES])}
    assert named == {n: size[n] * F32 for n in names}  # every parameter once, b0 and b1 apart
    assert not scatters[schema.FIX].str.contains("reduce-scatter the gradients").any()


def test_harness_analyze_reads_the_fsdp_step_on_its_8_devices(tmp_path):
    import harness

    params, batch = fsdp.init(jax.random.key(0), fsdp.LAYERS, fsdp.B)
    sharded = jax.sharding.NamedSharding(fsdp.mesh, jax.sharding.PartitionSpec("batch"))
    params, batch = jax.device_put((params, batch), sharded)
    run = harness.analyze(fsdp.train_step, params, batch, steps=2, warmup=1, chip="h100",
                          out_dir=tmp_path)
    assert run.meta[schema.DEVICE_COUNT] == 8 and " on 8x cpu" in run.title
    c = run.collectives
    assert set(c[schema.MESH_AXES]) == {"batch"} and len(c) == 4 * (len(fsdp.LAYERS) - 1)
    assert c[schema.SOURCE_LINE].str.contains("shard_map_fsdp.py:").all()


def test_nnx_fsdp_tp_under_harness_profile(tmp_path):
    pytest.importorskip("flax.nnx")
    from public_programs import nnx_fsdp_tp as nnx_prog

    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json",
                   str(PUBLIC / "nnx_fsdp_tp.py"), env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert report["meta"][schema.DEVICE_COUNT] == 8
    assert report["title"].startswith("jit_train_step on 8x cpu")
    assert "the script ran on 8 cpu devices (jax_num_cpu_devices set by the script)" in \
        report["notes"]
    rows = report["collectives"]
    data, model = nnx_prog.MESH["data"], nnx_prog.MESH["model"]
    D, F, B = nnx_prog.D, nnx_prog.F, nnx_prog.B
    gathers = [r for r in rows if r[schema.COLLECTIVE] == "all-gather"]
    # W_in[D_data, F_model] and W_out[F_model, D_data]: gathered over data to D x F/model
    assert gathers and {r[schema.MESH_AXES] for r in gathers} == {"data"}
    assert {r[schema.REASON] for r in gathers} == {"FSDP weight gather"}
    assert {r[schema.DEVICE_BYTES] for r in gathers} == {D * F // model * F32}
    (tp,) = [r for r in rows if r[schema.MESH_AXES] == "model"]
    assert tp[schema.REASON] == "case 3: partial sums"  # h[B/data, F_model] . W_out[F_model, D]
    assert tp[schema.DEVICE_BYTES] == B // data * D * F32 and "Megatron" not in tp[schema.FIX]
    (grad,) = [r for r in rows if r[schema.REASON] == "gradient reduction"]
    # both kernels' gradients whole over data (on this device's model half), then sliced; the
    # loss, one f32, rides along
    assert grad[schema.MESH_AXES] == "data"
    assert grad[schema.DEVICE_BYTES] == (2 * D * F // model + 1) * F32
    assert "XLA:CPU lowers that as this all-reduce and a slice" in grad[schema.WHY]
    assert "reduce-scatter" not in grad[schema.FIX]
    assert sum(1 for r in rows if r[schema.COLLECTIVE] == "all-reduce") == 2
