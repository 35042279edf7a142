"""Reading XLA's buffer assignment and live ranges (harness.memory.assignment) and the buffers
live at the compiled peak (harness.memory.buffers): they add up to the peak, by arithmetic."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from harness import schema
from harness.hlo import parse_module
from harness.memory import assignment, buffers, kinds
from harness.memory.dump import read_dump

ASSIGNMENT = """\
BufferAssignment:
allocation 0: size 32768, output shape is |f32[64,128]|, maybe-live-out:
 value: <27 dot_general.5 @0> (size=32768,offset=0): f32[64,128]{1,0}
allocation 1: size 32768, parameter 0, shape |f32[64,128]| at ShapeIndex {}:
 value: <24 w.1 @0> (size=32768,offset=0): f32[64,128]{1,0}
allocation 4: size 49152, preallocated-temp:
 value: <29 multiply_add_fusion @0> (size=16384,offset=32768): f32[32,128]{1,0}
 value: <30 while.2{3} (phi) @1> (size=64,offset=0): f32[16]{0:S(1)}
a line from a newer XLA that this reader does not know
"""
LIVE_RANGE = """\
HloLiveRange (max 4):
  InstructionSequence:
    0:w.1
    1:multiply_add_fusion
    2:dot_general.5
  BufferLiveRange:
    w.1{}:0-3
    multiply_add_fusion{}:1-2
    dot_general.5{}:2-3
    while.2{3}:1-1
  Live ranges at 2 (peak):
    dot_general.5{}: 32768 bytes (cumulative: 32768 bytes)
    w.1{}: 32768 bytes (cumulative: 65536 bytes)
    multiply_add_fusion{}: 16384 bytes (cumulative: 81920 bytes)
  Stack trace breakdown for peak usage: 81 920 bytes
    main (100.0%, total: 81 920 bytes)
"""


def test_reads_the_dump_text_defensively():
    a = assignment.read(ASSIGNMENT, LIVE_RANGE)
    assert a.skipped == 1                                     # the unknown line, passed over
    assert a.values["w.1"].role == "parameter" and a.values["w.1"].parameter == 0
    assert a.values["dot_general.5"].role == "output"
    assert a.values["multiply_add_fusion"].role == "temporary"
    assert a.values["while.2{3}"].space == 1                  # an on-chip memory space
    assert a.sequence == ["w.1", "multiply_add_fusion", "dot_general.5"]
    assert a.peak_at == 2 and a.peak_bytes == 4 * 64 * 128 * 2 + 4 * 32 * 128
    pos, live = a.timeline()
    # main memory only: w over 0-3, the fusion over 1-2, the dot over 2-3
    assert list(live) == [32768, 32768 + 16384, 32768 + 16384 + 32768, 32768 + 32768]
    assert live[a.peak_at] == a.peak_bytes


def test_garbage_is_not_an_error():
    a = assignment.read("nonsense\nallocation x: y\n", "Live ranges at z\n")
    assert a.peak_bytes == 0 and a.peak_at is None and not a.values


PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def loss(w, x):
        h = checkpoint_name(jnp.tanh(x @ w), "mlpwi_0")
        return (h @ w.T).sum()

    step = jax.jit(jax.grad(loss))
    c = step.lower(jax.ShapeDtypeStruct((64, 128), jnp.float32),
                   jax.ShapeDtypeStruct((32, 64), jnp.float32)).compile()
    m = c.memory_analysis()
    print(m.argument_size_in_bytes, m.output_size_in_bytes, m.temp_size_in_bytes)
""")


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    out = tmp_path_factory.mktemp("dump")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_dump_to={out} --xla_dump_hlo_as_text")
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    args, outputs, temps = (int(x) for x in done.stdout.split())
    return read_dump(out), (args, outputs, temps)


def test_buffers_at_the_peak_sum_to_the_compiled_peak(dumped):
    dump, (args, outputs, temps) = dumped
    a = assignment.read(dump.assignment, dump.live_range)
    df = buffers.at_peak(a, parse_module(dump.hlo))
    # the arguments from their shapes: w f32[64,128] and x f32[32,64]
    assert args == 4 * 64 * 128 + 4 * 32 * 64
    assert outputs == 4 * 64 * 128                            # dL/dw has w's shape
    assert df[schema.BUFFER_BYTES].sum() == a.peak_bytes
    assert a.timeline()[1][a.peak_at] == a.peak_bytes
    # XLA packs the live buffers into arguments + outputs + its temporaries' arena: the peak
    # cannot pass their sum, and holds both arguments whole (they live the whole program)
    assert args <= a.peak_bytes <= args + outputs + temps
    held = df[df[schema.HOLDS] == kinds.ARGUMENTS][schema.BUFFER_BYTES].sum()
    assert held == args
    # every buffer the program made names the JAX operation and the line that made it
    made = df[df[schema.OPCODE] != "parameter"]
    assert len(made) and (made[schema.SCOPE] != "").all()
    assert made[schema.SOURCE_LINE].str.contains(":").any()


def test_kinds_from_op_names():
    ctx = {"parameter_dims": {(64, 128)}}
    kind = lambda role, op, shape="f32[1]": kinds.kind_of(  # noqa: E731
        kinds.Buffer(role, op, shape, "", ctx))
    assert kind("parameter", "params['layers']['w_q_DNH']") == kinds.PARAMETERS
    assert kind("parameter", "opt_state['mu']['embed_VD']") == kinds.OPTIMIZER
    assert kind("parameter", "cache") == kinds.KV_CACHE
    assert kind("parameter", "inputs_BT") == kinds.ARGUMENTS
    assert kind("temporary", "jit(step)/transpose(jvp())/dot_general",
                "f32[64,128]{1,0}") == kinds.GRADIENTS
    assert kind("temporary", "jit(step)/transpose(jvp())/dot_general",
                "f32[32,128]{1,0}") == kinds.TEMPORARIES
    assert kind("temporary", "jit(step)/jvp()/tanh") == kinds.ACTIVATIONS
    assert kind("temporary", "jit(step)/add") == kinds.TEMPORARIES
    assert kinds.checkpoint_name("jit(f)/jvp()/while/body/closed_call/btd,df->btf/dot_general"
                                 ) == "btd,df->btf"
    assert kinds.checkpoint_name("jit(f)/jvp()/mlpwi_0/tanh") == "mlpwi_0"
