"""Fixtures for the Helm chart's tests: the cached helm binary and a renderer.

``charts/tools.sh`` builds helm from the Go module proxy on a cold cache (minutes, once) and
only prints its path when warm; these tests never skip for a missing tool.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hulk"
K8S_VERSION = "v1.35.8"  # the sandbox's Kubernetes, as in charts/check.sh

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def chart_tools() -> dict[str, str]:
    """HELM, KUBECONFORM and SCHEMAS from charts/tools.sh (built on first use)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "charts" / "tools.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"charts/tools.sh failed:\n{proc.stderr[-3000:]}"
    tools = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert Path(tools["HELM"]).is_file(), tools
    return tools


def helm_template(
    helm: str,
    values: Sequence[Path | str] = (),
    set_values: Sequence[str] = (),
    namespace: str = "hulk-system",
    release: str = "hulk",
) -> list[dict[str, Any]]:
    """``helm template`` output as a list of objects (hooks included)."""
    cmd = [
        helm,
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        K8S_VERSION,
    ]
    for v in values:
        cmd += ["-f", str(v)]
    for s in set_values:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="session")
def render(chart_tools: dict[str, str]) -> Render:
    """``render(values=[...], set_values=[...], namespace=..., release=...)``."""

    def _render(**kwargs: Any) -> list[dict[str, Any]]:
        return helm_template(chart_tools["HELM"], **kwargs)

    return _render
