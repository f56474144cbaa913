"""Writes this node's ``NodeLatency`` object (cluster-scoped, named after the node).

The object is created once (owned by the Node, so it goes when the Node goes) and from
then on only its status subresource is patched, at most once per publish interval: the
agent calls :meth:`Publisher.write_status` on that cadence, never more often.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hulk_probe import API_VERSION, KIND
from hulk_probe.estimator import Estimate
from hulk_probe.kube import NODE_LATENCIES, Kube
from hulk_probe.metrics import ProbeMetrics

log = logging.getLogger(__name__)


def rfc3339(ts: float) -> str:
    """``2026-01-02T03:04:05.678Z`` for a Unix time."""
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def status_body(estimates: Mapping[str, Estimate], now: float, interval_s: float) -> dict[str, Any]:
    """The status patch for the current estimates (peers never probed yet are left out)."""
    peers: list[dict[str, Any]] = []
    for name in sorted(estimates):
        est = estimates[name]
        if est.reachable is None:
            continue
        entry: dict[str, Any] = {"node": name, "reachable": est.reachable, "samples": est.samples}
        if est.one_way_ms is not None:
            entry["latencyMs"] = round(est.one_way_ms, 3)
        if est.last_success is not None:
            entry["lastUpdated"] = rfc3339(est.last_success)
        if est.consecutive_failures:
            entry["consecutiveFailures"] = est.consecutive_failures
        peers.append(entry)
    reachable = sum(1 for p in peers if p["reachable"])
    return {
        "status": {
            "intervalSeconds": interval_s,
            "lastPublished": rfc3339(now),
            "reachablePeers": reachable,
            "unreachablePeers": len(peers) - reachable,
            "peers": peers,
        }
    }


class Publisher:
    def __init__(
        self,
        api_client: Any,
        node_name: str,
        metrics: ProbeMetrics | None = None,
        field_manager: str = "hulk-probe",
    ) -> None:
        self.kube = Kube(api_client)
        self.node_name = node_name
        self.path = f"{NODE_LATENCIES}/{node_name}"
        self.metrics = metrics
        self.field_manager = field_manager
        self.owner_uid: str | None = None
        self.writes = 0

    def _count(self, kind: str) -> None:
        self.writes += 1
        if self.metrics is not None:
            self.metrics.api_writes.labels(self.node_name, kind).inc()

    def ensure_object(self, owner_uid: str | None = None) -> bool:
        """Create the object unless it exists; True when this made a write."""
        from kubernetes.client.exceptions import ApiException

        if owner_uid is not None:
            self.owner_uid = owner_uid
        try:
            self.kube.request("GET", self.path)
            return False
        except ApiException as exc:
            if exc.status != 404:
                raise
        meta: dict[str, Any] = {
            "name": self.node_name,
            "labels": {"app.kubernetes.io/managed-by": "hulk-probe"},
        }
        if self.owner_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.owner_uid}
            ]
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
        try:
            self.kube.request(
                "POST", NODE_LATENCIES, body=body, query=[("fieldManager", self.field_manager)]
            )
        except ApiException as exc:
            if exc.status != 409:  # 409: created meanwhile, which is fine
                raise
            return False
        self._count("create")
        log.info("created %s %s", KIND, self.node_name)
        return True

    def write_status(self, body: Mapping[str, Any]) -> None:
        """One status patch; if the object vanished, recreate it instead (still one write)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.kube.merge_patch(
                f"{self.path}/status", dict(body), query=[("fieldManager", self.field_manager)]
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("%s %s was deleted; recreating it", KIND, self.node_name)
            self.ensure_object()
            return
        self._count("status")
