"""The Server -> Node manifest builder, without a cluster."""

from __future__ import annotations

import re

import pytest

from hulk_planner.datasets import paper_cluster
from hulk_planner.generate import random_cluster
from hulk_planner.model import Server
from hulk_sandbox.errors import SandboxError
from hulk_sandbox.nodes import (
    FAKE_ANNOTATION,
    GPU,
    REGION_ANNOTATION,
    cluster_for,
    is_ready,
    label_value,
    node_manifest,
    slug,
)

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def server(**kw: object) -> Server:
    fields: dict = dict(
        name="beijing-0",
        region="Beijing",
        gpus=8,
        gpu_memory_gib=40.0,
        gpu_tflops=312.0,
        gpu_product="A100-SXM4-40GB",
        compute_capability="8.0",
    )
    fields.update(kw)
    return Server(**fields)


def test_labels_of_a_gpu_server() -> None:
    node = node_manifest(server())
    labels = node["metadata"]["labels"]
    assert node["metadata"]["name"] == "beijing-0"
    assert labels["kubernetes.io/hostname"] == "beijing-0"
    assert labels["topology.kubernetes.io/region"] == "beijing"
    assert labels["topology.kubernetes.io/zone"] == "beijing-a"
    assert labels["nvidia.com/gpu.product"] == "A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "40960"  # MiB per GPU
    assert labels["nvidia.com/gpu.compute.major"] == "8"
    assert labels["nvidia.com/gpu.compute.minor"] == "0"
    assert node["metadata"]["annotations"][FAKE_ANNOTATION] == "fake"
    assert node["metadata"]["annotations"][REGION_ANNOTATION] == "Beijing"


def test_an_accented_region_is_labelled_as_the_planner_slugs_it() -> None:
    """Before: "São Paulo" was labelled s-o-paulo, which no allowedRegions entry the
    planner reads (sao-paulo) matched."""
    labels = node_manifest(server(region="São Paulo"))["metadata"]["labels"]
    assert labels["topology.kubernetes.io/region"] == "sao-paulo"
    assert labels["topology.kubernetes.io/zone"] == "sao-paulo-a"


def test_resources_are_capacity_and_allocatable() -> None:
    status = node_manifest(server(gpus=4))["status"]
    assert status["capacity"] == status["allocatable"]
    assert status["allocatable"][GPU] == "4"
    assert {"cpu", "memory", "pods"} <= set(status["allocatable"])


def test_zone_from_server_and_region_slug() -> None:
    labels = node_manifest(server(region="Sao Paulo", zone="sa-east-1b"))["metadata"]["labels"]
    assert labels["topology.kubernetes.io/region"] == "sao-paulo"
    assert labels["topology.kubernetes.io/zone"] == "sa-east-1b"
    assert slug(" Neimeng ") == "neimeng"


def test_unknown_product_and_capability_are_left_out() -> None:
    labels = node_manifest(server(gpu_product=None, compute_capability=None))["metadata"]["labels"]
    assert "nvidia.com/gpu.product" not in labels
    assert "nvidia.com/gpu.compute.major" not in labels
    assert labels["nvidia.com/gpu.count"] == "8"


def test_label_values_are_sanitized() -> None:
    assert label_value("NVIDIA A100 (80GB)") == "NVIDIA-A100-80GB"
    assert LABEL_VALUE.match(label_value("x" * 80 + "!"))
    assert len(label_value("x" * 80)) == 63


def test_taint_is_opt_in() -> None:
    assert not node_manifest(server())["spec"].get("taints")
    taints = node_manifest(server(), taint=True)["spec"]["taints"]
    assert taints == [{"key": FAKE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]


def test_builder_is_pure() -> None:
    s = server()
    a = node_manifest(s)
    a["metadata"]["labels"]["x"] = "y"
    assert node_manifest(s) != a


@pytest.mark.parametrize("cluster", [paper_cluster(), random_cluster(300, seed=3)])
def test_every_server_gives_a_valid_node(cluster) -> None:  # type: ignore[no-untyped-def]
    manifests = [node_manifest(s) for s in cluster.servers]
    names = [m["metadata"]["name"] for m in manifests]
    assert len(set(names)) == len(names)
    for m in manifests:
        assert DNS1123.match(m["metadata"]["name"])
        for value in m["metadata"]["labels"].values():
            assert LABEL_VALUE.match(value), value
    regions = {m["metadata"]["labels"]["topology.kubernetes.io/region"] for m in manifests}
    assert len(regions) > 1


def test_cluster_for() -> None:
    assert len(cluster_for("paper").servers) == 47
    assert len(cluster_for("12").servers) == 12
    for bad in ("0", "-3", "many"):
        with pytest.raises(SandboxError, match="--nodes"):
            cluster_for(bad)


def test_is_ready_needs_condition_and_no_not_ready_taint() -> None:
    ready = {"type": "Ready", "status": "True"}
    taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    assert is_ready({"status": {"conditions": [ready]}, "spec": {}})
    assert not is_ready({"status": {"conditions": [ready]}, "spec": {"taints": [taint]}})
    assert not is_ready({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not is_ready({"status": {}})


def test_a_speed_the_gpu_labels_do_not_give_is_the_operators_annotation() -> None:
    """``add-node --gpu-tflops 5`` printed 5 TFLOPS and the operator planned with the
    product's 312 (a user trial): the node now says it as the operator reads it."""
    from hulk_operator.inventory import node_info

    def tflops(s: Server) -> float | None:
        body = node_manifest(s)
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        info = node_info(body)
        return info.server.gpu_tflops if info.server is not None else None

    assert "hulk.dev/gpu-tflops" not in node_manifest(server())["metadata"]["annotations"]
    assert tflops(server()) == 312.0  # from the product label, as with GFD alone
    slow = server(gpu_tflops=5.0)
    assert node_manifest(slow)["metadata"]["annotations"]["hulk.dev/gpu-tflops"] == "5"
    assert tflops(slow) == 5.0
    unknown = server(gpu_product="FOO-9000", compute_capability=None, gpu_tflops=100.0)
    assert tflops(unknown) == 100.0  # (it was "unknown GPU speed": not offered)
    for s in paper_cluster().servers:  # (the paper's: every speed from the labels)
        assert "hulk.dev/gpu-tflops" not in node_manifest(s)["metadata"]["annotations"]
