"""What a run records of which code and which host ran it: the HLO fingerprint, the commit and
dirty flag, the host probe."""
import subprocess
from pathlib import Path

from harness import schema
from harness.capture import environment
from harness.capture.environment import fingerprint
from harness.chip import drift

HLO = Path(__file__).parent / "fixtures" / "hlo" / "fori_loop.txt"


def test_the_fingerprint_ignores_metadata_and_sees_the_program():
    text = HLO.read_text()
    assert "stack_frame_id=9" in text and "f32[128,256]" in text
    moved = text.replace("stack_frame_id=9", "stack_frame_id=12").replace(
        'op_name="jit(fn)/while/body/add"', 'op_name="jit(fn)/renamed"')
    assert fingerprint(moved) == fingerprint(text)
    # the header's source tables move with any edit of the Python around the program
    assert fingerprint("FileNames\n1 \"edited.py\"\n\n" + text) == fingerprint(text)
    assert fingerprint(text.replace("f32[128,256]", "f32[128,512]")) != fingerprint(text)
    assert len(fingerprint(text)) == 16


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_commit_and_dirty_flag_are_the_working_directorys(tmp_path, monkeypatch):
    repo = tmp_path / "user"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "model.py").write_text("x = 1\n")
    _git(repo, "add", "model.py")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "one")
    monkeypatch.chdir(repo)
    sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo,
                         capture_output=True, text=True).stdout.strip()
    assert environment.git_state() == {schema.GIT_SHA: sha, schema.GIT_DIRTY: False}
    (repo / "untracked.txt").write_text("results are not the code\n")
    assert environment.git_state()[schema.GIT_DIRTY] is False
    (repo / "model.py").write_text("x = 2\n")
    assert environment.git_state() == {schema.GIT_SHA: sha, schema.GIT_DIRTY: True}


def test_the_probe_record_keeps_every_repeat():
    before, after = ([10.0, 12.0, 11.0], [100.0, 90.0, 95.0]), ([8.0, 9.0], [96.0, 97.0])
    rec = drift.record(before, after)
    assert rec == {drift.REFERENCE: [12.0, 9.0], drift.RATES: [[10.0, 12.0, 11.0], [8.0, 9.0]],
                   drift.CPU_RATES: [[100.0, 90.0, 95.0], [96.0, 97.0]]}
    assert drift.record(None, after) is None


def test_the_probe_runs_on_the_host_cpu():
    import jax

    rates, cpu_rates = drift.probe(jax.devices()[:2])
    assert len(rates) == len(cpu_rates) == drift.REPEATS
    # 2 x 512^3 FLOPs per device per repeat, over the wall time: a CPU is not faster than 1e13
    assert all(0 < r < 1e13 for r in rates) and all(0 < r < 1e13 for r in cpu_rates)


def test_no_devices_no_probe():
    assert drift.probe([]) is None
