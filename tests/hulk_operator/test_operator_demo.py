"""``hulk demo`` checks its manifests before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot be read: No such file or directory (check the path)"),
        ("apiVersion: hulk.dev/v1\nkind: HulkTrainingJob\nmetadata: {name: x}\n", "apiVersion"),
    ],
)
def test_bad_manifests_stop_the_demo_before_the_sandbox_starts(
    tmp_path: Path, text: str | None, message: str
) -> None:
    """Before: the sandbox and the operator started, reading the file then failed, and the
    operator's thread outlived the sandbox, retrying its watches for minutes."""
    jobs = tmp_path / "jobs.yaml"
    if text is not None:
        jobs.write_text(text)
    box = tmp_path / "box"
    proc = subprocess.run(
        [sys.executable, "-m", "hulk", "demo", "--jobs", str(jobs), "--dir", str(box)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hulk demo: error: ") and message in lines[0]
    assert not box.exists()
