"""Process groups: `stop` ends a component and whatever it forked; PIDs are checked."""

from __future__ import annotations

import time
from pathlib import Path

from hulk_sandbox import processes
from hulk_sandbox.processes import Proc


def _pids_in_group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_stop_kills_the_whole_group(tmp_path: Path) -> None:
    # A shell that ignores SIGTERM and has a child: SIGKILL of the group must follow.
    script = "trap '' TERM; sleep 300 & wait"
    proc = processes.spawn("stubborn", ["sh", "-c", script], tmp_path / "log")
    deadline = time.monotonic() + 5
    while len(_pids_in_group(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_pids_in_group(proc.pid)) == 2
    processes.stop([proc], timeout=0.5)
    assert not processes.alive(proc)
    time.sleep(0.1)
    assert _pids_in_group(proc.pid) == []


def test_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    proc = processes.spawn("short", ["sleep", "30"], tmp_path / "log")
    stranger = Proc.from_json({**proc.to_json(), "start_time": proc.start_time + 1})
    assert processes.alive(proc)
    assert not processes.alive(stranger)
    processes.stop([stranger])  # must not touch the real process
    assert processes.alive(proc)
    processes.stop([proc])
    assert not processes.alive(proc)
