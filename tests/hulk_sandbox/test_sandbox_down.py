"""`hulk sandbox up` then `down` in a directory of its own: nothing may be left behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox


def hulk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hulk", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=1800,  # a cold cache builds the binaries first
    )


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


def test_down_leaves_no_process_and_no_listening_port(tmp_path: Path) -> None:
    box = tmp_path / "small"
    up = hulk("up", "--nodes", "3", "--dir", str(box), "--logs", str(tmp_path / "logs"))
    assert up.returncode == 0, up.stderr
    state = json.loads((box / "state.json").read_text())
    ports = list(state["ports"].values())
    pids = [p["pid"] for p in state["processes"]]
    assert len(pids) == 5
    assert all(listening(p) for p in ports if p != state["ports"]["etcd_peer"])
    assert sorted(processes_mentioning(str(box))) == sorted(pids)

    again = hulk("up", "--nodes", "3", "--dir", str(box))
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "already runs" in again.stderr

    status = hulk("status", "--dir", str(box))
    assert status.returncode == 0, status.stdout
    assert "running" in status.stdout

    down = hulk("down", "--dir", str(box))
    assert down.returncode == 0, down.stderr
    assert processes_mentioning(str(box)) == []
    assert [p for p in ports if listening(p)] == []
    assert not box.exists()
    assert hulk("status", "--dir", str(box)).returncode == 1
