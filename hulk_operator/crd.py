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


def install(api: client.ApiClient, *, peering: bool = True) -> list[str]:
    """Applies the CRDs and waits until they are served; returns their names."""
    paths = [JOB_CRD] + ([LATENCY_CRD] if LATENCY_CRD.exists() else [])
    paths += [PEERING_CRDS] if peering else []
    names = []
    for path in paths:
        for doc in documents(path):
            apply_crd(api, doc)
            names.append(doc["metadata"]["name"])
    wait_established(api, names)
    return names
