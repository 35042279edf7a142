"""Out of memory ends in an answer (issue 56 part 4): a user's function (``harness.analyze``) or
script (``harness profile``) past the device limit ``$SCALING_HARNESS_DEVICE_MEMORY`` sets gets
the would-be peak, what holds it and the ranked remedies; a train step too large for a v5e
chip gets the same ahead of time (``harness.memory_of(..., chip="tpu-v5e")``). Every figure
below is from the shapes and the book's arithmetic."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import units
from harness.capture.memory import MEMORY_ENV, OutOfMemory
from harness.errors import HarnessError
from harness.memory import kinds, remedies
from harness.memory.oom import need_from_message

ROOT = Path(__file__).resolve().parents[1]
M, K, N = 64, 128, 256  # x_MK @ w_KN, f32
ARGS = (M * K + K * N) * 4      # 163,840 B: x and w
SORTED = M * N * 4              # 65,536 B: the product, sorted in place (a temporary)
OUT = 4                         # the f32 scalar returned
SCRIPT = f"""
import jax, jax.numpy as jnp

def step(x, w):
    return jnp.sum(jnp.sort(x @ w, axis=0))

print(jax.jit(step)(jnp.ones(({M}, {K})), jnp.ones(({K}, {N}))))
"""


def step(x, w):
    import jax.numpy as jnp

    return jnp.sum(jnp.sort(x @ w, axis=0))


def test_analyze_out_of_memory_answers(monkeypatch):
    import jax.numpy as jnp

    import harness

    monkeypatch.setenv(MEMORY_ENV, "200KiB")
    with pytest.raises(OutOfMemory) as e:
        harness.analyze(step, jnp.ones((M, K)), jnp.ones((K, N)))
    err = e.value
    assert isinstance(err, HarnessError)
    assert err.need == ARGS + SORTED + OUT and err.capacity == 200 * 1024
    text = str(err)
    assert text.splitlines()[0].startswith("step does not fit: it would need 224.00 KiB per "
                                           "device, a cpu holds 200.00 KiB")
    assert "what holds it (the buffers live at XLA's peak): temporaries 64.00 KiB, arguments " \
           "160.00 KiB" in text
    saved = dict(zip(err.remedies["remedy"], err.remedies["saves_bytes"]))
    # the arguments sharded over the 8 devices keep 1/8; fp32 arguments in bf16 halve; half
    # the batch halves the temporaries (the sorted product and the sum, before it is copied
    # out); no output has an argument's shape: nothing to donate
    assert saved == {"FSDP / ZeRO-3": ARGS * 7 // 8, "bf16 where fp32": ARGS // 2,
                     "smaller batch": (SORTED + OUT) // 2}
    assert list(err.remedies["remedy"])[0] == "FSDP / ZeRO-3"  # most bytes for no FLOPs


def test_remedies_from_the_book():
    P, n, A = 1000, 4, 20_000  # parameters, devices, activation bytes
    held = remedies.Held({kinds.PARAMETERS: 2 * P, kinds.OPTIMIZER: 8 * P,
                          kinds.GRADIENTS: 2 * P, kinds.ACTIVATIONS: A},
                         {kinds.OPTIMIZER: 8 * P}, devices=n, peak=12 * P + A, capacity=10_000)
    ranked = remedies.rank(held).set_index("remedy")
    # training.md §6.3: the 12 bytes a parameter (AdamW's 10 and bf16 gradients) / n
    assert ranked.loc["FSDP / ZeRO-3", "saves_bytes"] == 12 * P * (n - 1) // n
    assert ranked.loc["ZeRO-1", "saves_bytes"] == 8 * P * (n - 1) // n
    # transformers.md §5.2: block remat keeps 1 of ~20 tensors; 6P -> 8P FLOPs, +1/3
    assert ranked.loc["remat (full)", "saves_bytes"] == A * 19 // 20
    assert ranked.loc["remat (full)", "cost"] == pytest.approx(1 / 3)
    assert ranked.loc["remat (dots saved)", "saves_bytes"] == A * 13 // 20
    assert ranked.loc["int8 moments", "saves_bytes"] == 8 * P * 3 // 4
    assert ranked.loc["smaller batch", "saves_bytes"] == A // 2
    peak_after = 12 * P + A - A * 19 // 20
    assert ranked.loc["remat (full)", "peak_after_bytes"] == peak_after
    assert bool(ranked.loc["remat (full)", "fits"]) is (peak_after <= 10_000)
    per_cost = ranked["saves_bytes"] / ranked["cost"]
    assert list(per_cost) == sorted(per_cost, reverse=True)


def test_need_from_xla_messages():
    G = 2**30  # libtpu's G
    assert need_from_message("Ran out of memory on HBM, the total memory required for HLO "
                             "temporaries (18.88G) exceeds available HBM (15.75G).") == \
        (int(18.88 * G), int(15.75 * G))
    assert need_from_message("Used 20.50G of 15.48G hbm") == (int(20.5 * G), int(15.48 * G))
    assert need_from_message("Out of memory while trying to allocate 17179869184 bytes.") == \
        (17179869184, None)


def test_script_out_of_memory_answers(tmp_path):
    script = tmp_path / "big.py"
    script.write_text(SCRIPT)
    env = {**os.environ, MEMORY_ENV: "200KiB"}
    done = subprocess.run([sys.executable, "-m", "harness", "--devices", "1", "profile",
                           str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"{script}: jit(step) does not fit: it would need 224.00 KiB per device" in done.stdout
    assert "cheapest ways to fit" in done.stdout and "bf16 where fp32: saves 80.00 KiB" in \
        done.stdout
    # the answer is the harness's, printed once: no traceback from the script's process
    assert f'{ROOT}/harness' not in done.stderr and "Traceback" not in done.stderr


def test_memory_command_takes_a_function_of_ones_own(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    path = tmp_path / "fn.py"
    path.write_text(SCRIPT.split("print(")[0] + "def build():\n    return jax.jit(step), "
                    f"(jnp.ones(({M}, {K})), jnp.ones(({K}, {N})))\n")
    monkeypatch.setenv(MEMORY_ENV, "200KiB")
    assert main(["memory", f"{path}:build"]) == 1
    out = capsys.readouterr().out
    assert "step does not fit: it would need 224.00 KiB per device, a cpu holds 200.00 KiB" in out
    assert f"1. FSDP / ZeRO-3: saves {units.fmt_bytes(ARGS * 7 // 8)}" in out
    assert main(["memory", str(path)]) == 2  # a script without its function: one line
    assert "name the function in it" in capsys.readouterr().err


def _train_step():
    import jax
    import jax.numpy as jnp

    def train_step(params, opt_state, x_BD):
        def loss(p):
            return jnp.mean(jnp.tanh(x_BD @ p["w_in_DF"]) @ p["w_out_FD"])
        g = jax.grad(loss)(params)
        mu = jax.tree.map(lambda m, gi: 0.9 * m + 0.1 * gi, opt_state["mu"], g)
        nu = jax.tree.map(lambda v, gi: 0.999 * v + 0.001 * gi * gi, opt_state["nu"], g)
        new = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
        return new, {"mu": mu, "nu": nu}

    return jax.jit(train_step)


@pytest.mark.libtpu
def test_train_step_too_large_for_v5e_ahead_of_time():
    import jax
    import jax.numpy as jnp

    import harness

    D, F, B = 8192, 49152, 4096
    s = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    params = {"w_in_DF": s(D, F), "w_out_FD": s(F, D)}
    report = harness.memory_of(_train_step(), params, {"mu": params, "nu": params}, s(B, D),
                               chip="tpu-v5e")
    W = D * F * 4  # one f32 weight: 1.5 GiB
    assert report.fits is False and "RESOURCE_EXHAUSTED" in report.refused
    text = "\n".join(report.notes)
    # the step returns 2 weights and 4 moments beside the ones it was given: donated, 6 W
    assert f"donate arguments: saves {units.fmt_bytes(6 * W)}" in text
    # AdamW's fp32 moments, 4 W, in int8: 3/4 of them
    assert f"int8 moments: saves {units.fmt_bytes(4 * W * 3 // 4)}" in text
    assert text.index("donate arguments") < text.index("int8 moments")


@pytest.mark.libtpu
def test_closing_over_a_cpu_mesh_says_so():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    import harness

    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    fn = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh, PartitionSpec("x")))
    with pytest.raises(HarnessError, match="cannot be lowered for tpu-v5e: it closes over a "
                                           "mesh of this host's devices"):
        harness.memory_of(fn, jnp.ones((8, 8)), chip="tpu-v5e")
