"""Installing the CustomResourceDefinitions the operator needs: ``HulkTrainingJob``
(``crds/hulktrainingjobs.hulk.dev.yaml``), the probe's ``NodeLatency`` when its file is
there, and kopf's peering resources (for leader election)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

HERE = Path(__file__).resolve().parent
CRD_DIR = HERE.parent / "crds"
JOB_CRD = CRD_DIR / "hulktrainingjobs.hulk.dev.yaml"
LATENCY_CRD = CRD_DIR / "nodelatencies.hulk.dev.yaml"
PEERING_CRDS = HERE / "kopf-peering.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def apply_crd(api: client.ApiClient, crd: dict[str, Any]) -> None:
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise
        live = ext.read_custom_resource_definition(name)
        assert live.metadata is not None
        crd = {
            **crd,
            "metadata": {**crd["metadata"], "resourceVersion": live.metadata.resource_version},
        }
        ext.replace_custom_resource_definition(name, crd)  # type: ignore[arg-type]


def wait_established(api: client.ApiClient, names: list[str], timeout: float = 60.0) -> None:
    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = (crd.status and crd.status.conditions) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)


def wait_served(api: client.ApiClient, crds: list[dict[str, Any]], timeout: float = 60.0) -> None:
    """Waits until the API server's watch cache serves each resource: right after a CRD is
    Established, lists from the cache (and so a watch, e.g. kopf's) answer 429 "storage is
    (re)initializing" for a moment, and kopf then retries with a backoff of seconds."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        while True:
            try:
                custom.list_cluster_custom_object(
                    spec["group"], version, spec["names"]["plural"], limit=1, resource_version="0"
                )
                break
            except ApiException as exc:
                if exc.status not in (404, 429, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def install(api: client.ApiClient, *, peering: bool = True) -> list[str]:
    """Applies the CRDs and waits until they are served; returns their names."""
    paths = [JOB_CRD] + ([LATENCY_CRD] if LATENCY_CRD.exists() else [])
    paths += [PEERING_CRDS] if peering else []
    docs = [doc for path in paths for doc in documents(path)]
    for doc in docs:
        apply_crd(api, doc)
    names = [doc["metadata"]["name"] for doc in docs]
    wait_established(api, names)
    wait_served(api, docs)
    return names
