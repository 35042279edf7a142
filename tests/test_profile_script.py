"""``harness profile SCRIPT`` runs the script as it runs alone: in a process of its own, with its
own XLA_FLAGS (or the environment's, or ``--devices``), leaving nothing in the temp folder, and
its collectives' axes named after the meshes it built. Real subprocesses; ``--chip cpu`` (the
registry's placeholder) where the test is not about the calibrated chip, to keep them short."""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from profiling import env_for, executions, harness, report_of

from harness import schema
from harness.runs.run import Run

# a jitted step over a 1-D mesh of every device, run STEPS times; the device count comes from
# the flags the script sets (first line, when it sets any), the environment or --devices
STEPS = 3
SHARDED = textwrap.dedent(f"""
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("data")))
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
