"""``.ci/env.sh``: the shared venv under ``$HULK_CACHE``, set up by one clone at a time,
and never marked complete when its set-up failed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_SH = ROOT / ".ci" / "env.sh"


def _venv(cache: Path) -> Path:
    """The venv path env.sh computes (the same hash of requirements/dev.txt)."""
    digest = subprocess.run(
        ["bash", "-c", f"sha256sum < {ROOT / 'requirements' / 'dev.txt'} | cut -c1-12"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    version = f"{sys.version_info[0]}{sys.version_info[1]}"
    return cache / f"venv-py{version}-{digest}"


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "HULK_CACHE": str(cache)}


def test_a_failed_setup_is_not_marked_complete_where_sourced_in_a_list(tmp_path: Path) -> None:
    """``source .ci/env.sh && ...`` (as ``.ci/run``'s stage does, in an ``if``) turns
    ``set -e`` off: before, a pip that failed (here: no index to install from) went on to
    mark the venv complete, and every later run used a venv without torch."""
    env = {**_env(tmp_path), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    got = subprocess.run(
        ["bash", "-c", f"source {ENV_SH} && echo SOURCED"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert got.returncode != 0, got.stdout
    assert "SOURCED" not in got.stdout
    assert "setting up" in got.stderr and "failed" in got.stderr
    assert not (_venv(tmp_path) / ".complete").exists()


def test_a_second_clone_waits_for_the_one_setting_up_the_venv(tmp_path: Path) -> None:
    """While another clone holds the cache's lock (it creates the venv or re-points its
    editable install), env.sh waits, says so, and goes on once the lock is let go."""
    venv = _venv(tmp_path)
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    (venv / ".editable-root").write_text(f"{ROOT}\n")
    os.utime(venv / ".editable-root", (time.time() + 60, time.time() + 60))  # (newer)
    with open(tmp_path / "venv.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            ["bash", "-c", f"source {ENV_SH} && echo SOURCED $VIRTUAL_ENV"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tmp_path),
            cwd=ROOT,
        )
        time.sleep(1.5)
        assert proc.poll() is None  # waiting for the lock
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "another clone is setting up" in err
    assert out.strip() == f"SOURCED {venv}"


def test_a_failed_editable_install_is_tried_again(tmp_path: Path) -> None:
    """A pip that fails the editable install: the file says so and returns 1, and the
    install is not recorded as done (before, its marker was written, so it was never tried
    again and the ``hulk`` command stayed missing: a review); the lock is let go."""
    venv = _venv(tmp_path)
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    pip = venv / "bin" / "pip"
    pip.write_text("#!/bin/sh\nexit 1\n")
    pip.chmod(0o755)
    got = subprocess.run(
        ["bash", "-c", f"source {ENV_SH} && echo SOURCED"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=ROOT,
        timeout=60,
    )
    assert got.returncode != 0 and "SOURCED" not in got.stdout
    assert "failed" in got.stderr
    assert not (venv / ".editable-root").exists()
    with open(tmp_path / "venv.lock", "w") as lock:  # let go (not held by a leaked fd)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
