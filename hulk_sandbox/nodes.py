"""Simulated GPU servers: the planner's ``Server`` as a kwok-managed Kubernetes ``Node``.

:func:`node_manifest` is pure (a dict out, no cluster needed). What a Node carries:

- ``kubernetes.io/hostname`` = the server's name; ``kubernetes.io/os``/``arch``.
- ``topology.kubernetes.io/region`` = the region as a lowercase DNS-style slug
  (``"Sao Paulo"`` -> ``sao-paulo``; label values cannot hold spaces), and
  ``topology.kubernetes.io/zone`` = ``Server.zone`` or ``<region-slug>-a``. The region's
  original spelling is kept in the annotation ``sandbox.hulk.io/region``.
- NVIDIA GPU Feature Discovery labels: ``nvidia.com/gpu.present``, ``gpu.product``,
  ``gpu.count``, ``gpu.memory`` (MiB per GPU) and ``gpu.compute.major``/``minor`` (the last
  three only when the server names a product/capability).
- ``status.capacity``/``allocatable``: ``nvidia.com/gpu`` = the GPU count, and cpu, memory and
  pods sized like a GPU server (:data:`CPU_PER_GPU`, :data:`MEMORY_GIB_PER_GPU`).
- kwok's conventions: the annotation ``kwok.x-k8s.io/node: fake`` (kwok runs with
  ``--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake``) and the label
  ``type: kwok``. kwok's optional taint ``kwok.x-k8s.io/node=fake:NoSchedule`` is off by
  default (``taint=True`` adds it): every node here is fake, so pods would need a toleration
  that real GPU clusters never ask for.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from hulk_planner.datasets import slug  # (the planner's: accents dropped as it drops them)
from hulk_sandbox.errors import SandboxError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from hulk_planner.model import Cluster, Server

FAKE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_SELECTOR = f"{FAKE_ANNOTATION}=fake"
FAKE_TAINT = {"key": FAKE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
REGION_ANNOTATION = "sandbox.hulk.io/region"
TFLOPS_ANNOTATION = "sandbox.hulk.io/gpu-tflops"
CPU_PER_GPU = 12
MEMORY_GIB_PER_GPU = 96
MAX_PODS = 110
GPU = "nvidia.com/gpu"
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    return _LABEL_VALUE_BAD.sub("-", text)[:63].strip("-_.")


def node_manifest(server: Server, *, taint: bool = False) -> dict[str, Any]:
    """The Node object for ``server`` (see the module's docstring for what it carries)."""
    region = slug(server.region)
    zone = server.zone or f"{region}-a"
    labels = {
        "kubernetes.io/hostname": server.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "topology.kubernetes.io/region": label_value(region),
        "topology.kubernetes.io/zone": label_value(zone),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(server.gpus),
        "nvidia.com/gpu.memory": str(round(server.gpu_memory_gib * 1024)),
    }
    if server.gpu_product:
        labels["nvidia.com/gpu.product"] = label_value(server.gpu_product)
    if server.compute_capability:
        major, _, minor = server.compute_capability.partition(".")
        labels["nvidia.com/gpu.compute.major"] = major
        labels["nvidia.com/gpu.compute.minor"] = minor or "0"
    resources = {
        "cpu": str(CPU_PER_GPU * server.gpus),
        "memory": f"{MEMORY_GIB_PER_GPU * server.gpus}Gi",
        "pods": str(MAX_PODS),
        "ephemeral-storage": "1Ti",
        GPU: str(server.gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": server.name,
            "labels": labels,
            "annotations": {
                FAKE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                REGION_ANNOTATION: server.region,
                TFLOPS_ANNOTATION: f"{server.gpu_tflops:g}",
                **_speed(server),
            },
        },
        "spec": {"taints": [dict(FAKE_TAINT)]} if taint else {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _speed(server: Server) -> dict[str, str]:
    """The operator's own annotation of a GPU's speed (``hulk.dev/gpu-tflops``) where the
    product and compute-capability labels do not give the server's: ``hulk sandbox add-node
    --gpu-tflops 5`` printed 5 TFLOPS and the operator planned with the product's 312 (a
    user trial). Elsewhere (the paper's servers) the operator takes it from the labels, as
    on a real cluster with GPU Feature Discovery alone."""
    from hulk_planner.hardware import tflops_for

    if tflops_for(server.gpu_product, server.compute_capability) == server.gpu_tflops:
        return {}
    return {"hulk.dev/gpu-tflops": f"{server.gpu_tflops:g}"}


MAX_NODES = 5_000


def cluster_for(spec: str) -> Cluster:
    """``"paper"`` -> the Hulk paper's 47 servers; ``"N"`` -> N generated servers."""
    if spec == "paper":
        from hulk_planner.datasets import paper_cluster

        return paper_cluster()
    if spec.isdigit() and int(spec) > MAX_NODES:  # (100,000 took the API server to 2.4 GB)
        raise SandboxError(
            f"--nodes {spec}: at most {MAX_NODES:,} nodes on one machine",
            "give fewer; 1,000 start in about a minute",
        )
    if spec.isdigit() and int(spec) > 0:
        from hulk_planner.generate import random_cluster

        return random_cluster(int(spec), seed=0)
    raise SandboxError(
        f"--nodes {spec!r} is neither 'paper' nor a positive number", "e.g. --nodes paper or 8"
    )


def is_ready(node: Any) -> bool:
    """Ready condition True and the not-ready taint lifted (a ``V1Node`` or a dict)."""
    if isinstance(node, dict):
        conditions = node.get("status", {}).get("conditions") or []
        taints = node.get("spec", {}).get("taints") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and not any(t["key"] == NOT_READY_TAINT for t in taints)
    conditions = (node.status and node.status.conditions) or []
    taints = (node.spec and node.spec.taints) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ready and not any(t.key == NOT_READY_TAINT for t in taints)


def create_nodes(api: ApiClient, servers: Iterable[Server], *, taint: bool = False) -> None:
    """Creates one Node per server, a few requests at a time (1,000 nodes take seconds)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    manifests: list[Any] = [node_manifest(s, taint=taint) for s in servers]

    def create(manifest: Any) -> None:
        # The raw answer: turning it into a V1Node would cost more than the request itself.
        resp: Any = core.create_node(manifest, _preload_content=False)
        resp.read()

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
    try:
        for future in [pool.submit(create, m) for m in manifests]:
            future.result()
    finally:  # (Ctrl-C: the queued creations dropped; before, all of them ran first)
        pool.shutdown(wait=True, cancel_futures=True)


def delete_node(api: ApiClient, name: str) -> None:
    """Deletes the node and its lease (``kube-node-lease``), which the garbage collector
    would delete a moment later: a node made again under the name before that found the
    old lease, kwok v0.8.0 took it over, lost it to the collector, made a new one 10 s
    later, and never ran the node's pods after (a flaky test; docs/sandbox.md)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    client.CoreV1Api(api).delete_node(name)
    try:
        client.CoordinationV1Api(api).delete_namespaced_lease(name, LEASE_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


LEASE_NAMESPACE = "kube-node-lease"


def wait_ready(api: ApiClient, names: Sequence[str], timeout: float = 120.0) -> None:
    """Returns once every named node is Ready without the not-ready taint."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    wanted = set(names)
    deadline = time.monotonic() + timeout
    pending = wanted
    while time.monotonic() < deadline:
        # Raw JSON: deserializing 1,000 V1Node objects costs seconds on every poll.
        resp: Any = core.list_node(_preload_content=False)
        items = json.loads(resp.data)["items"]
        ready = {n["metadata"]["name"] for n in items if is_ready(n)}
        pending = wanted - ready
        if not pending:
            return
        time.sleep(0.25 if len(wanted) <= 100 else 1.0)  # listing 1,000 nodes is not free
    sample = ", ".join(sorted(pending)[:5])
    raise SandboxError(
        f"{len(pending)} of {len(wanted)} nodes not Ready after {timeout:g}s (e.g. {sample})",
        "see the kwok and kube-controller-manager logs",
    )
