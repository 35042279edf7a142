"""The commit a capture records is of the code that ran: a user's function's own checkout (none
outside any), the harness's programs' the working directory's or the harness's."""
from __future__ import annotations

import importlib.util
import subprocess

import jax

from harness import schema
from harness.capture import environment, steps


def _user_fn(folder, name="user_step"):
    (folder / f"{name}.py").write_text("import jax\n\n@jax.jit\ndef step(x):\n    return x * 2\n")
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.step


def _git(folder, *args):
    return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_users_function_outside_any_checkout_has_no_commit(tmp_path):
    step = _user_fn(tmp_path)
    assert environment.source_dir(step) == tmp_path.resolve()
    assert steps._commit(step) == {}  # not the harness's own checkout


def test_a_users_function_in_a_checkout_has_its_commit(tmp_path):
    _git(tmp_path, "init", "-q")
    step = _user_fn(tmp_path)
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "one")
    sha = _git(tmp_path, "rev-parse", "--short=12", "HEAD")
    assert steps._commit(step) == {schema.GIT_SHA: sha, schema.GIT_DIRTY: False}
    (tmp_path / "user_step.py").write_text("changed\n")
    assert steps._commit(step)[schema.GIT_DIRTY] is True


def test_the_harnesss_own_programs_keep_the_working_directorys_commit():
    from workloads import matmul

    assert environment.source_dir(matmul.build).is_relative_to(environment.HARNESS_ROOT)
    assert steps._commit(matmul.build) == environment.git_state()
    assert steps._commit(jax.jit(lambda x: x)) == environment.git_state()  # this checkout's test
