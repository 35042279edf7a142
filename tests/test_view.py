"""harness view: the xprof UI listens on loopback only, and a busy port is one line."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.cli import main

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
LOOPBACK_HEX = {"0100007F",                               # 127.0.0.1 (little-endian)
                "00000000000000000000000001000000",       # ::1
                "0000000000000000FFFF00000100007F"}       # ::ffff:127.0.0.1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["run", "matmul", "--steps", "1", "--warmup", "0", "--out", str(root)]) == 0
    return next(p for p in root.iterdir() if p.is_dir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc/*/stat's parent ids."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, grew = {pid}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in tree} - tree
        tree |= new
        grew = bool(new)
    return tree


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """(local address as /proc/net hex, port) of every listening TCP socket of ``pids``."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            addr, port = cols[1].split(":")
            if cols[3] == LISTEN and cols[9] in inodes:
                out.append((addr, int(port, 16)))
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net")
def test_view_listens_on_loopback_only(run_dir):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "view", str(run_dir),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline, status = time.time() + 60, None
        while time.time() < deadline and status != 200:
            time.sleep(0.5)
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status
            except OSError:
                pass
        assert status == 200
        sockets = _listening(_tree(proc.pid))
        assert (port in {p for _, p in sockets}), sockets
        assert all(addr in LOOPBACK_HEX for addr, _ in sockets), sockets  # no 0.0.0.0, no ::
    finally:
        proc.terminate()  # harness view stops its server too
        out, err = proc.communicate(timeout=30)
    assert f"http://localhost:{port}/" in out and "warning" not in err


def test_busy_port_is_one_line(run_dir, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["view", str(run_dir), "--port", str(port)]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"harness view: error: --port {port} on 127.0.0.1: ")
    assert "--port (0 = any free port)" in line


def test_a_wider_host_warns(run_dir, capsys, monkeypatch):
    from harness.commands import view

    calls = []
    monkeypatch.setattr(view, "serve", lambda cmd: calls.append(cmd) or 0)
    assert main(["view", str(run_dir), "--port", "0", "--host", "0.0.0.0"]) == 0
    err = capsys.readouterr().err
    assert "warning: serving on 0.0.0.0" in err
    assert calls[0][-2] == "0.0.0.0" and int(calls[0][-1]) > 0  # port 0 -> a free port
