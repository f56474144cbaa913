"""`hulk sandbox` errors: one line naming the problem and the fix, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def hulk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hulk", "sandbox", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_bad_nodes_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = hulk("up", "--nodes", "lots", "--dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--nodes 'lots'" in proc.stderr
    assert not (tmp_path / "s").exists()


def test_status_and_down_without_a_sandbox(tmp_path: Path) -> None:
    status = hulk("status", "--dir", str(tmp_path))
    assert status.returncode == 1
    assert "no sandbox" in status.stdout
    down = hulk("down", "--dir", str(tmp_path))
    assert down.returncode == 0
    assert "no sandbox" in down.stdout
