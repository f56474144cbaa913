"""Publishing latencies that were measured elsewhere as ``NodeLatency`` objects, in the shape
the probe agent writes them: for demos and tests that need known link latencies (the Hulk
paper's measurements, say) without running agents behind a delaying proxy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

GROUP, VERSION, PLURAL = "hulk.dev", "v1alpha1", "nodelatencies"


def publish_latencies(
    api: client.ApiClient,
    rows: Mapping[str, Mapping[str, float | None]],
    at: datetime | None = None,
    owners: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> None:
    """``rows[node][peer]`` is the one-way latency in ms measured from ``node``, or None for
    a peer reported unreachable. Creates each node's object if missing (owned by its Node
    where ``owners`` gives the Node's uid, as the probe's are: it goes with the Node), then
    writes its status. ``timeout_s`` bounds each API call (none by default)."""
    custom = client.CustomObjectsApi(api)
    bound: dict[str, Any] = {} if timeout_s is None else {"_request_timeout": timeout_s}
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for node, peers in rows.items():
        body: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeLatency",
            "metadata": {"name": node},
        }
        if (owners or {}).get(node):
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": (owners or {})[node]}
            ]
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body, **bound)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        entries = [
            {"node": p, "reachable": False, "samples": 0, "consecutiveFailures": 3}
            if ms is None
            else {"node": p, "reachable": True, "latencyMs": ms, "samples": 8, "lastUpdated": stamp}
            for p, ms in sorted(peers.items())
        ]
        reachable = sum(1 for e in entries if e["reachable"])
        status = {
            "lastPublished": stamp,
            "intervalSeconds": 2.0,
            "reachablePeers": reachable,
            "unreachablePeers": len(entries) - reachable,
            "peers": entries,
        }
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, node, {"status": status}, **bound
        )


def forget_latencies(api: client.ApiClient, nodes: Iterable[str]) -> None:
    """Delete the named nodes' ``NodeLatency`` objects (missing ones are fine)."""
    custom = client.CustomObjectsApi(api)
    for node in nodes:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
