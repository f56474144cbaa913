"""examples/: the kind config (labels a kubelet may set itself) and the label script."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# k8s.io/kubelet/pkg/apis/well_known_labels.go (v0.35): what a kubelet may set on its Node.
KUBELET_LABELS = {
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
}
KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def kubelet_may_set(key: str) -> bool:
    """IsKubeletLabel, plus NodeRestriction's ban on node-restriction.kubernetes.io/."""
    namespace = key.split("/", 1)[0] if "/" in key else ""
    if namespace == "node-restriction.kubernetes.io" or namespace.endswith(
        ".node-restriction.kubernetes.io"
    ):
        return False
    reserved = any(
        namespace == ns or namespace.endswith("." + ns) for ns in ("kubernetes.io", "k8s.io")
    )
    if not reserved or key in KUBELET_LABELS:
        return True
    return any(namespace == ns or namespace.endswith("." + ns) for ns in KUBELET_NAMESPACES)


def test_kubelet_label_rules() -> None:
    assert kubelet_may_set("topology.kubernetes.io/region")
    assert kubelet_may_set("nvidia.com/gpu.product")
    assert not kubelet_may_set("node-role.kubernetes.io/worker")
    assert not kubelet_may_set("topology.kubernetes.io/rack")
    assert not kubelet_may_set("node-restriction.kubernetes.io/pool")


def test_kind_config_has_three_regions_of_labelled_gpu_workers() -> None:
    cfg = yaml.safe_load((EXAMPLES / "kind-multi-region.yaml").read_text())
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    workers = [n for n in cfg["nodes"] if n["role"] == "worker"]
    regions = {w["labels"]["topology.kubernetes.io/region"] for w in workers}
    assert len(regions) == 3
    for node in cfg["nodes"]:
        for key, value in node.get("labels", {}).items():
            assert kubelet_may_set(key), f"the kubelet refuses to start with label {key}"
            assert isinstance(value, str), f"{key}: label values must be strings"
    for w in workers:
        labels = w["labels"]
        assert labels["topology.kubernetes.io/zone"].startswith(
            labels["topology.kubernetes.io/region"]
        )
        for gfd in ("gpu.product", "gpu.count", "gpu.memory", "gpu.compute.major"):
            assert f"nvidia.com/{gfd}" in labels


def test_label_script_is_valid_bash() -> None:
    script = EXAMPLES / "kind-label-nodes.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--fake-gpus" in out.stdout
