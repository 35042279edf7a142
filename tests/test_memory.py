"""Memory before running: the fit check, XLA out-of-memory as one line, oom points in a sweep."""
import types

import jax
import jax.numpy as jnp
import pytest

from harness import units
from harness.capture import memory
from harness.errors import HarnessError


def _compiled(arg, out, alias, temp, code):
    stats = types.SimpleNamespace(argument_size_in_bytes=arg, output_size_in_bytes=out,
                                  alias_size_in_bytes=alias, temp_size_in_bytes=temp,
                                  generated_code_size_in_bytes=code)
    return types.SimpleNamespace(memory_analysis=lambda: stats)


class _Device:
    platform, device_kind = "gpu", "NVIDIA H100 80GB HBM3"

    def __init__(self, limit):
        self.limit = limit

    def memory_stats(self):
        return {"bytes_limit": self.limit, "bytes_in_use": 0}


def test_parse_and_format_bytes():
    assert memory.parse_bytes("16GiB") == 16 * 2**30
    assert memory.parse_bytes("1000") == 1000 and memory.parse_bytes("1.5 MiB") == 3 * 2**19
    assert units.fmt_bytes(16 * 2**30) == "16.00 GiB" and units.fmt_bytes(1536) == "1.50 KiB"
    with pytest.raises(HarnessError, match="16GiB"):
        memory.parse_bytes("lots")


def test_refuses_a_program_over_the_device_limit(monkeypatch):
    monkeypatch.delenv(memory.MEMORY_ENV, raising=False)
    # needs arguments + outputs - aliased + temporaries + code = 6 + 2 - 1 + 8 + 1 = 16 GiB
    c = _compiled(6 * 2**30, 2 * 2**30, 2**30, 8 * 2**30, 2**30)
    assert memory.check_fits(c, [_Device(80 * 2**30)]) == (16 * 2**30, 80 * 2**30)
    with pytest.raises(memory.OutOfMemory) as e:
        memory.check_fits(c, [_Device(80 * 2**30), _Device(15 * 2**30)], knobs="remat")
    msg = str(e.value)
    assert "\n" not in msg and "16.00 GiB per device" in msg and "15.00 GiB" in msg
    assert msg.endswith("what helps: remat")


def test_the_override_sets_the_capacity_on_cpu(monkeypatch):
    x = jax.device_put(jnp.ones((1024,), jnp.float32), jax.devices()[0])
    compiled = jax.jit(lambda a: a * 2).lower(x).compile()
    need = memory.needed_bytes(compiled)
    assert need >= 2 * x.nbytes  # the argument and a fresh output of 4 KiB each
    monkeypatch.setenv(memory.MEMORY_ENV, "1KiB")
    with pytest.raises(memory.OutOfMemory, match="has 1.00 KiB"):
        memory.check_fits(compiled, jax.devices()[:1])
    monkeypatch.setenv(memory.MEMORY_ENV, "1GiB")
    assert memory.check_fits(compiled, jax.devices()[:1]) == (need, 2**30)


def test_cpu_without_override_gets_a_share_of_host_ram(monkeypatch):
    monkeypatch.delenv(memory.MEMORY_ENV, raising=False)
    cpu = jax.devices()[0]
    ram = memory._host_ram()
    assert memory.capacity_bytes(cpu, 8) == ram // 8


def test_a_cpu_run_says_what_its_devices_need_of_the_hosts_ram(tmp_path, monkeypatch):
    from harness import schema
    from harness.capture.steps import capture

    # 8 devices of 1.5 GiB each share the host: 12 GiB together; a device's share is 3 GiB
    meta = {schema.MEMORY_NEEDED_BYTES: 3 * 2**29, schema.MEMORY_CAPACITY_BYTES: 3 * 2**30,
            schema.DEVICE_COUNT: 8, "platform": "cpu"}
    note = memory.host_note(meta)
    assert "1.50 GiB per device" in note and "3.00 GiB" in note and "12.00 GiB together" in note
    assert memory.host_note({**meta, "platform": "gpu"}) == ""  # its own memory, not the host's
    assert memory.host_note({**meta, schema.MEMORY_NEEDED_BYTES: None}) == ""
    # two processes of 4 devices each: each process's 4 share its host, 6 GiB
    assert "6.00 GiB together" in memory.host_note({**meta, "process_count": 2})
    # a capture records XLA's figure and the capacity it was checked against
    monkeypatch.setenv(memory.MEMORY_ENV, "1GiB")
    x = jax.device_put(jnp.ones((1024,), jnp.float32), jax.devices()[0])
    cap = capture(jax.jit(lambda a: a * 2), (x,), warmup=0, steps=1, out_dir=tmp_path)
    assert cap.meta[schema.MEMORY_NEEDED_BYTES] >= 2 * x.nbytes  # argument + output
    assert cap.meta[schema.MEMORY_CAPACITY_BYTES] == 2**30


def test_xla_out_of_memory_becomes_one_line():
    err = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                                     "16.02GiB.\n  ... 40 lines of allocator state ...")
    with pytest.raises(memory.OutOfMemory) as e, memory.oom_as_error("llama_decode (8b)", "B"):
        raise err
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("llama_decode (8b) ran out of device memory")
    assert "16.02GiB" in msg and msg.endswith("what helps: B")
    other = jax.errors.JaxRuntimeError("INVALID_ARGUMENT: something else")
    with pytest.raises(jax.errors.JaxRuntimeError), memory.oom_as_error("x"):
        raise other
