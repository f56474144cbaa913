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


def test_bad_timeout_or_folder_stops_before_any_process_starts(tmp_path: Path) -> None:
    """Before: --timeout -1 started etcd and kube-apiserver, then failed their health check;
    an uncreatable --dir was an "unexpected FileNotFoundError"."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (("--timeout", "-1", "--dir", str(tmp_path / "s")), "--timeout must be a number"),
        (("--timeout", "inf", "--dir", str(tmp_path / "s")), "above 0, got inf"),
        (("--dir", str(blocker / "s")), f"--dir {blocker / 's'}: cannot create it"),
    ]
    for args, message in cases:
        proc = hulk("up", *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
        assert not (tmp_path / "s").exists()


def test_an_empty_folder_a_file_or_a_state_of_another_shape_is_one_line(tmp_path: Path) -> None:
    """An empty --dir was the current folder (state files written there); a --dir that is a
    file, and a state file of another JSON shape, were "unexpected" errors; --nodes 100000
    was taken, and took the API server to 2.4 GB (a review)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    listed, keyless = tmp_path / "listed", tmp_path / "keyless"
    for folder, state in ((listed, "[]"), (keyless, '{"processes": [{"name": "etcd"}]}')):
        folder.mkdir()
        (folder / "state.json").write_text(state)
    cases = [
        (("up", "--nodes", "4", "--dir", ""), "hulk sandbox: --dir: is empty (give a folder"),
        (("status", "--dir", str(blocker)), f"--dir {blocker}: is a file, not a folder"),
        (("status", "--dir", str(listed)), "state.json is corrupt (TypeError: a list, not an"),
        (("down", "--dir", str(keyless)), "state.json is corrupt (KeyError: "),
        (("up", "--nodes", "100000", "--dir", str(tmp_path / "s")), "at most 5,000 nodes"),
    ]
    for args, message in cases:
        proc = hulk(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "keyless", "listed"]
