"""``harness profile SCRIPT`` runs the script as it runs alone: in a process of its own, with its
own XLA_FLAGS (or the environment's, or ``--devices``), leaving nothing in the temp folder, and
its collectives' axes named after the meshes it built (also a plain-JAX step in the pattern of
jax's explicit-sharding MNIST example: ``reshard`` and ``out_sharding`` under ``jax.set_mesh``).
Real subprocesses; ``--chip cpu`` (the
registry's placeholder) where the test is not about the calibrated chip, to keep them short."""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from profiling import env_for, executions, harness, report_of

from harness import schema
from harness.record import Run

# a jitted step over a 1-D mesh of every device, run STEPS times; the device count comes from
# the flags the script sets (first line, when it sets any), the environment or --devices
STEPS = 3
SHARDED = textwrap.dedent(f"""
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    # a copy, no program (an eager jnp.ones is one, which XLA:CPU may run inline, traced)
    x = jax.device_put(np.ones((64, 32), np.float32), NamedSharding(mesh, P("data")))
    total = jax.jit(lambda x: (x * 2.0).sum())
    for _ in range({STEPS}):
        total(x).block_until_ready()
""")
OWN_FLAGS = ('import os\n'
             'os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"\n')


@pytest.mark.parametrize("own, flags, devices, count, why", [
    (True, None, None, 4, "XLA_FLAGS set by the script"),
    (True, None, 2, 2, "--devices 2"),
    (False, 2, None, 2, "XLA_FLAGS in the environment"),
])
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_script_keeps_its_own_device_count(tmp_path, own, flags, devices, count, why):
    (tmp_path / "mine.py").write_text((OWN_FLAGS if own else "") + SHARDED)
    extra = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={flags}"} if flags else {}
    argv = [*(["--devices", str(devices)] if devices else []), "profile", "--chip", "cpu",
            "--format", "json", "mine.py"]
    done = harness(tmp_path, *argv, env=env_for(tmp_path, **extra))
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert report["meta"][schema.DEVICE_COUNT] == count
    assert report["title"].startswith(f"jit__lambda on {count}x cpu")
    assert f"the script ran on {count} cpu devices ({why})" in report["notes"]
    assert executions(report) == {"jit__lambda": STEPS}
    # the sum over a mesh of `count` devices: one all-reduce, over the axis the script named
    assert {c[schema.MESH_AXES] for c in report["collectives"]} == {"data"}
    assert report["meta"][schema.MESHES] == [
        {"axes": {"data": count}, "devices": list(range(count))}]
    assert not list(tmp_path.glob("harness-profile-*"))  # no trace left behind


def test_a_device_count_the_script_asks_jax_for_is_named(tmp_path):
    # jax's own setting (its default is 1 CPU device): the count and the note say the script's
    (tmp_path / "mine.py").write_text('import jax\njax.config.update("jax_num_cpu_devices", 4)\n'
                                      + SHARDED)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "mine.py",
                   env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert report["meta"][schema.DEVICE_COUNT] == 4
    assert "the script ran on 4 cpu devices (jax_num_cpu_devices set by the script)" in \
        report["notes"]


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_cpu_chip_is_calibrated_on_the_scripts_devices(tmp_path):
    (tmp_path / "mine.py").write_text(OWN_FLAGS + SHARDED)
    done = harness(tmp_path, "profile", "--format", "json", "mine.py")
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert report["meta"][schema.CALIBRATION]["device_count"] == 4
    assert report["meta"][schema.CHIP] == "cpu"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_stored_run_keeps_its_trace_and_the_scripts_commit(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "train.py").write_text(OWN_FLAGS + SHARDED)
    _git(repo, "init", "-q")
    _git(repo, "add", "train.py")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "one")
    sha = _git(repo, "rev-parse", "--short=12", "HEAD")
    (repo / "train.py").write_text(OWN_FLAGS + SHARDED + "# edited\n")  # uncommitted
    done = harness(tmp_path, "profile", "--chip", "cpu", "--out", "runs", "project/train.py")
    assert done.returncode == 0, done.stderr[-3000:]
    (stored,) = list((tmp_path / "runs").iterdir())
    meta = json.loads((stored / "meta.json").read_text())
    trace = Path(meta[schema.TRACE_FILE])
    assert trace == (stored / "trace").resolve() and trace.is_dir()
    assert list(trace.rglob("*.xplane.pb"))
    assert (meta[schema.GIT_SHA], meta[schema.GIT_DIRTY]) == (sha, True)
    header = f"trace {trace} · traced "
    assert header in done.stdout and header in (stored / "report.md").read_text()
    assert f"commit {sha[:10]} (dirty) · harness " in done.stdout
    assert Run.load(stored).meta[schema.SCRIPT]["outcome"] == "finished"
    assert not list(tmp_path.glob("harness-profile-*"))


def test_keep_trace_keeps_it_where_asked_and_says_so(tmp_path):
    (tmp_path / "mine.py").write_text(SHARDED)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--keep-trace", "kept", "mine.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("trace: kept")
    assert len(list((tmp_path / "kept").rglob("*.xplane.pb"))) == 1  # one segment
    assert f"trace {(tmp_path / 'kept').resolve()}" in done.stdout
    # harness trace reads the kept folder as the profile read it
    again = harness(tmp_path, "trace", "kept", "--chip", "cpu", "--format", "json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert executions(json.loads(again.stdout)) == {"jit__lambda": STEPS}
    assert not list(tmp_path.glob("harness-profile-*"))


LAYERS = (16, 32, 32, 4)  # the MLP's widths: input, two hidden, classes
MNIST_STEPS = 4
EXPLICIT_MNIST = textwrap.dedent(f"""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, numpy as np
    from jax.scipy.special import logsumexp
    from jax.sharding import AxisType, PartitionSpec as P, reshard

    def predict(params, inputs):
        activations = inputs
        for w, b in params[:-1]:
            activations = jnp.tanh(jnp.dot(activations, w) + b)
        w, b = params[-1]
        logits = jnp.dot(activations, w, out_sharding=P("batch", None)) + b
        return logits - logsumexp(logits, axis=1, keepdims=True)

    def loss(params, batch):
        inputs, targets = batch
        return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))

    @jax.jit
    def train_step(params, batch):
        grads = [(reshard(dw, P()), reshard(db, P()))
                 for dw, db in jax.grad(loss)(params, batch)]
        return [(w - 0.01 * dw, b - 0.01 * db) for (w, b), (dw, db) in zip(params, grads)]

    rng = np.random.RandomState(0)
    sizes = {LAYERS}
    mesh = jax.make_mesh((4,), ("batch",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        params = jax.device_put([(rng.randn(m, n).astype(np.float32),
                                  rng.randn(n).astype(np.float32))
                                 for m, n in zip(sizes[:-1], sizes[1:])], P())
        for _ in range({MNIST_STEPS}):
            batch = jax.device_put((rng.rand(32, sizes[0]).astype(np.float32),
                                    np.eye(sizes[-1], dtype=np.float32)[rng.randint(0, 4, 32)]),
                                   P("batch"))
            params = train_step(params, batch)
        jax.block_until_ready(params)
""")


def test_an_explicit_sharding_step_has_its_gradients_all_reduced_over_batch(tmp_path):
    (tmp_path / "mnist.py").write_text(EXPLICIT_MNIST)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", "mnist.py")
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    assert executions(report)["jit_train_step"] == MNIST_STEPS
    assert report["meta"][schema.MESHES] == [{"axes": {"batch": 4}, "devices": [0, 1, 2, 3]}]
    reduced = {}
    for c in report["collectives"]:
        assert c[schema.COLLECTIVE] == "all-reduce" and c[schema.MESH_AXES] == "batch"
        reduced[c[schema.PROGRAM]] = reduced.get(c[schema.PROGRAM], 0) + c[schema.DEVICE_BYTES]
    # every replicated weight's and bias's f32 gradient, summed over the batch shards
    weights = sum(m * n + n for m, n in zip(LAYERS[:-1], LAYERS[1:]))
    assert reduced == {"jit_train_step": 4 * weights}
